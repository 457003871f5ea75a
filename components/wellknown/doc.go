// Package wellknown names, once, what more than one binary or layer must agree on: ports, node
// labels, taints and annotations, paths on a machine, metric names and the names of in-cluster
// objects. It imports nothing, so a binary that needs a name does not link the package that
// renders machines or add-ons (kops keeps pkg/wellknownports and pkg/nodelabels for the same
// reason; a test in package imports holds the in-cluster binaries to it).
package wellknown
