// Package rolls holds the end-to-end scenarios of changing a running cluster: the roll drills (etcd members, apiservers, workers, certificate renewal) under a writer that records every acknowledged write, each on a rehearsal of its own.
package rolls
