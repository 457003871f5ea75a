// Package booted holds the end-to-end scenarios on booted machines: the stack's plan booted by
// nspawn.Boot (every machine a systemd-nspawn container started by systemd and cloud-init from
// its baked image), then every machine's boot, the cluster it forms, the data plane, a broken
// local disk, the operations layer on the workers, and the drills of package drills. It has no
// code of its own; see boot_test.go.
package booted
