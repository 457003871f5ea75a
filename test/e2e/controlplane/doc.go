// Package controlplane holds the end-to-end scenarios of the control plane: etcd and the
// apiservers behind the load balancer, failover and quorum drills, TLS and encryption at rest, the
// CIS benchmark, credentials, the add-ons applied as the services program registers them, and on
// booted machines the per-node agents' API load, the NOSPACE alert and the apiservers' automatic
// repairs. Each scenario is a function of a test on one fixture (framework.Running, or
// framework.Booted after NeedBoot), or, where it applies to both (events in their own etcd,
// encryption at rest, TLS everywhere), of the fixture's machines it is given; packages rehearsal
// and booted run them.
package controlplane
