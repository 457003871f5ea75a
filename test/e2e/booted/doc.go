// Package booted is a fixture, not a subsystem: it boots the stack's plan with nspawn.Boot (every
// machine a systemd-nspawn container started by systemd and cloud-init from its baked image) and
// runs on it, in order, the scenarios of the subsystems that need real machines (boot, controlplane,
// dataplane, join, ops, rolls, services, tenants) and the drills of package drills
// (scenarios_test.go). Its benchmarks (bench_test.go) measure the booted data plane.
package booted
