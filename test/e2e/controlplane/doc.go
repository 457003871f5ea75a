// Package controlplane holds the end-to-end scenarios of the control plane: etcd and the apiservers behind the load balancer, failover and quorum drills, TLS and encryption at rest, the CIS benchmark, credentials, and the add-ons applied as the services program registers them.
package controlplane
