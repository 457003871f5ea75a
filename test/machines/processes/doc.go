// Package processes starts a stack's control plane for real on this host (`make rehearse`): every
// etcd member, apiserver, controller-manager and scheduler the stack defines, started from their
// rendered systemd units, each machine on its own loopback address with the production ports. A
// TCP load balancer stands in for Azure's internal load balancer, Azurite for the backup store,
// and KWOK simulates the worker pools. Every difference from Azure is in machines.Deviations.
package processes
