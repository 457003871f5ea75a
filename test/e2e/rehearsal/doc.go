// Package rehearsal runs, on one process rehearsal of -stack that all of them share, the scenarios
// that leave the cluster as they found it or restore it: the control plane's (package controlplane)
// and the operations layer's (package ops). The drills that destroy a cluster keep rehearsals of
// their own (packages backups, rolls and scale).
package rehearsal
