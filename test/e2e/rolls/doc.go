// Package rolls holds the end-to-end scenarios of changing a running cluster: the roll drills (etcd members, apiservers, workers, certificate renewal) under a writer that records every acknowledged write, on a rehearsal of their own (roll_test.go), and the kubelet part on booted machines (KubeletUpgradeRoll, which package booted runs).
package rolls
