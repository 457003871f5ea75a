// Package machines is what the test environment's two machine runtimes share: a stack's machines
// rendered by the machine package (the renderers the Azure program uses) with every deviation
// from Azure applied (Layout, Deviations), the interface the drills act through (Fleet), the
// clients that reach the machines, and the host processes a runtime supervises (Proc).
//
// The runtimes are beside it: package processes runs each machine's rendered units as processes
// on a loopback address of its own, with KWOK for the workers; package nspawn boots every machine
// from its baked image in a systemd-nspawn container. Nothing in production imports them.
package machines
