// Package dataplane holds the end-to-end scenarios of the data plane on real kubelets: pods reach
// pods, Services and DNS across the workers' VNets, provider IDs, the API from a pod, the metadata
// endpoints out of reach, Prometheus's scrapes and the traffic counters. Its client pods
// (SharedClients, StartClients) serve the other subsystems' scenarios too. Package booted runs them.
package dataplane
