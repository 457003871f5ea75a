// Package bootcheck holds the checks `make test` runs on booted machines: the stack's plan booted
// by rehearsal.Boot (every machine a systemd-nspawn container started by systemd and cloud-init
// from its baked image), then every machine's boot, the cluster it forms, a broken local disk,
// and the drills of package drills. The package has no code of its own; see boot_test.go.
package bootcheck
