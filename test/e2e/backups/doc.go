// Package backups holds the end-to-end scenarios of etcd backups: the agent's snapshots in the blob store (Azurite), the restore gate, and the total-loss drill that wipes every etcd-main disk and restores from the store.
package backups
