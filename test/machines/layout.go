package machines

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Options shape a runtime's cluster. Both runtimes read Dir, Tools, Self, Dial and StoreHost;
// the rest is the process rehearsal's.
type Options struct {
	// Dir is the cluster's directory: build/rehearse/<env> for the process rehearsal.
	Dir string
	// Tools is the directory holding the pinned binaries (.tools/bin).
	Tools string
	// Base is the second octet of every loopback address, so rehearsals can run side by side. Default 0.
	Base int
	// NodesPerPool caps the KWOK nodes simulated per pool. Default 3.
	NodesPerPool int
	// Self is the command that runs the stand-ins and the host forwarder: Self + ["lb"|"imds"|"forward", flags...]
	// (Subcommand).
	Self []string
	// Dial opens this process's connections to the machines. Default: the host's network.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// StoreHost is the address the backup store listens on. Default 127.0.0.1.
	StoreHost string
	// EventsInMainEtcd starts the apiservers without the events override: Events in the main etcd,
	// as a cluster without the split (L03) keeps them. Only the scale benchmark's A/B storm sets it.
	EventsInMainEtcd bool
	// CPULimits caps the cores each role's processes use together (a cgroup per role), as if each
	// role had a machine of that size: the scale benchmark's capacity topology. None: unlimited.
	CPULimits map[string]float64
	// EtcdFsyncLatency gives each etcd member a data disk of its own, the disk stand-in over tmpfs,
	// whose every flush takes this long: the scale benchmark's capacity topology. 0: the data dir
	// is a plain directory on this machine's one disk.
	EtcdFsyncLatency time.Duration
}

// Instance is one machine of the cluster.
type Instance struct {
	// Name is the machine name Azure would give it.
	Name string
	Role string
	// IP is its address: its loopback address in the process rehearsal, its planned one when booted.
	IP string
	// Machine is its rendering: the process rehearsal runs it; booted machines run their user-data.
	Machine machine.Machine
	// Versions are the binaries it runs: a roll changes them machine by machine.
	Versions spec.Versions
}

// Layout is a cluster's machines and how to reach them, what both runtimes share.
type Layout struct {
	Options
	// Cluster is the stack's cluster as the runtime runs it (the process rehearsal maps its
	// network onto loopback).
	Cluster *spec.Cluster
	// Stack is the stack's cluster as its file says, what `make roll` compares with.
	Stack     *spec.Cluster
	Bundle    pki.Bundle
	Instances []Instance
}

// Of returns the instances of one role, in order.
func (p *Layout) Of(role string) []Instance {
	var out []Instance
	for _, in := range p.Instances {
		if in.Role == role {
			out = append(out, in)
		}
	}
	return out
}

// Kubeconfig is the admin kubeconfig that reaches the API through the load balancer.
func (p *Layout) Kubeconfig() string { return filepath.Join(p.Dir, "kubeconfig") }

// EndpointsFile lists every running process.
func (p *Layout) EndpointsFile() string { return filepath.Join(p.Dir, "endpoints.json") }

// LBStateFile is where the load balancer records which backends are in rotation.
func (p *Layout) LBStateFile() string { return filepath.Join(p.Dir, "lb.json") }

// Instance returns the named instance.
func (p *Layout) Instance(name string) (Instance, error) {
	for _, in := range p.Instances {
		if in.Name == name {
			return in, nil
		}
	}
	return Instance{}, fmt.Errorf("rehearsal: no machine %q", name)
}

// LogDir holds the logs of what the runtime started on this host.
func (p *Layout) LogDir() string { return filepath.Join(p.Dir, "logs") }

// MachinesDir holds every machine's root and disks.
func (p *Layout) MachinesDir() string { return filepath.Join(p.Dir, "machines") }

// WriteDeviations writes the runtime's differences from Azure (booted or not) to deviations.txt.
func (p *Layout) WriteDeviations(boot bool) error {
	return WriteFile(filepath.Join(p.Dir, "deviations.txt"), FormatDeviations(boot), 0o644)
}
