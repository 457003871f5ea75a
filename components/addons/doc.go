// Package addons defines the cluster add-ons the lessons ask for as typed Kubernetes objects
// (k8s.io/api): cluster DNS (L13), priorities and balloons (L15), cluster-autoscaler's Azure
// configuration (L19), and Prometheus with its scrape config and alert rules (L06, L10, L34). Gangs
// (L16) need no add-on: PodGroups are Kubernetes' own API (machine.GangAPI).
//
// The objects are defined once. The cluster services program registers them through pulumi-kubernetes
// (infra/clusteraddons); the rehearsal tests apply the same objects with server-side apply to a real
// apiserver and scheduler. Like the machine renderers, this package imports nothing from Pulumi.
//
// Rule for new add-ons (L07, L08): nothing that runs on every node may list or watch the API
// cluster-wide. A DaemonSet's service account gets no cluster-scoped list or watch; per-node agents
// that need cluster state read it through a cluster-level cache (one Deployment that watches and
// serves them). The rehearsal checks every DaemonSet here with the apiserver's own authorizer.
package addons
