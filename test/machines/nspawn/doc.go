// Package nspawn boots a stack's plan as machines (`make boot`): every etcd, apiserver and worker
// machine a systemd-nspawn container booted by systemd and cloud-init from its baked image, on
// network namespaces shaped like the cluster's peered VNets, with stand-ins for the load balancer, the
// instance metadata service and the backup store. Every difference from Azure is in
// machines.Deviations.
package nspawn
