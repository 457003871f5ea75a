package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/clusterforge/clusterforge/components/ops/joins"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/bench/fleet"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/processes"
	"github.com/clusterforge/clusterforge/test/scale"
)

// benchBase keeps the benchmark's rehearsal beside `make rehearse`'s (0) and the tests' (1-4).
const benchBase = 5

// benchFlags are bench-scale's flags; zero values keep scale.DefaultOptions (or LongOptions).
type benchFlags struct {
	out, steps, topology     string
	cpu                      string
	etcdFsync                time.Duration
	long, leasesOnly         bool
	warmUp, hold, stormPhase time.Duration
	restartSettle            time.Duration
	stormRounds, stormNodes  int
	restartInformers         int
	churn                    float64
	joinNodes, joinRounds    int
	fleetOut, commit         string
	fleetRuns                int
	fleetScale, speedup      float64
}

func (b *benchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.out, "out", "build/bench/scale", "bench-scale, bench-joins: report directory")
	fs.StringVar(&b.steps, "steps", "", "bench-scale: node counts of the ramp, comma-separated (default 500,1000,2500,5000,7500,10000)")
	fs.StringVar(&b.topology, "topology", processes.TopologyCapacity, fmt.Sprintf("bench-scale: %q (one machine of each control-plane role, each capped at its cores) or %q (the stack's own machines, sharing the cores)", processes.TopologyCapacity, processes.TopologyHA))
	fs.StringVar(&b.cpu, "cpu", "", "bench-scale: cores each role's machines get together, as role=cores,... (default in the capacity topology "+cpuText(processes.CapacityCPU)+")")
	fs.DurationVar(&b.etcdFsync, "etcd-fsync", 0, fmt.Sprintf("bench-scale: each etcd member's data on a disk stand-in of its own whose every flush takes this long (0: the topology's default, %s in the capacity topology; in the ha topology none, the members sharing this machine's disk)", processes.CapacityFsyncLatency))
	fs.BoolVar(&b.leasesOnly, "leases-only", false, "bench-scale: the lease-only microbenchmark: the nodes and their heartbeats alone, each step's cost per component, no storms")
	fs.BoolVar(&b.long, "long", false, "bench-scale: the full run: 20-minute holds, 10-minute storm phases")
	fs.DurationVar(&b.warmUp, "warm-up", 0, "bench-scale: warm-up discarded before each hold")
	fs.DurationVar(&b.hold, "hold", 0, "bench-scale: hold each step is judged on")
	fs.DurationVar(&b.stormPhase, "storm-phase", 0, "bench-scale: length of each storm phase (quiet, storm, recovery)")
	fs.IntVar(&b.stormRounds, "storm-rounds", 0, "bench-scale: split/unsplit pairs of storm runs")
	fs.IntVar(&b.stormNodes, "storm-nodes", 0, "bench-scale: node count of the storm (default: the largest passing step)")
	restart := scale.DefaultOptions("").Restart
	fs.IntVar(&b.restartInformers, "restart-informers", 0, fmt.Sprintf("bench-scale: node informers reconnecting in the restart storm (default %d)", restart.Informers))
	fs.DurationVar(&b.restartSettle, "restart-settle", 0, fmt.Sprintf("bench-scale: how long every probe call must meet its SLO for the restart storm to count as recovered (default %s)", restart.Settle))
	fs.Float64Var(&b.churn, "churn", 0, "bench-scale: pods created (and deleted once running) a second")
	fs.IntVar(&b.joinNodes, "join-nodes", 0, "bench-joins: nodes each run joins (default 1000)")
	fs.IntVar(&b.joinRounds, "join-rounds", 0, "bench-joins: rounds of each mode (default 3)")
	fs.StringVar(&b.fleetOut, "fleet-out", "build/bench/fleet", "bench-fleet: report directory")
	fs.StringVar(&b.commit, "commit", "", "bench-fleet, bench-scale: the commit measured, for the report (bench-scale: capacity.json, the figures make plan reads)")
	fs.IntVar(&b.fleetRuns, "runs", 3, "bench-fleet: runs of every scenario")
	fs.Float64Var(&b.fleetScale, "scale", 1, "bench-fleet: share of every scale set's capacity the fleet fills")
	fs.Float64Var(&b.speedup, "speedup", 60, "bench-fleet: how much faster than real time the model runs")
}

// benchFleet runs the fleet benchmark and writes its report.
func benchFleet(stack string, b benchFlags) error {
	c, err := spec.LoadStack(spec.StackFile(spec.StackDir, stack))
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var runs [][]fleet.Scenario
	for i := range b.fleetRuns {
		fmt.Printf("==> bench-fleet run %d of %d: %s at scale %g, %g times real time\n", i+1, b.fleetRuns, stack, b.fleetScale, b.speedup)
		run, err := fleet.Run(ctx, fleet.Options{Stack: stack, Cluster: c, Scale: b.fleetScale, Speedup: b.speedup, Progress: os.Stdout})
		if err != nil {
			return err
		}
		runs = append(runs, run)
	}
	s := fleet.Summarize(runs)
	s.Date, s.Commit, s.Machine = time.Now().UTC().Format("2006-01-02"), b.commit, scale.ThisMachine(b.fleetOut)
	s.Stack, s.Scale, s.Speedup = stack, b.fleetScale, b.speedup
	if err := s.Write(b.fleetOut); err != nil {
		return err
	}
	fmt.Print(s.Markdown())
	fmt.Printf("==> report in %s (summary.json, fleet.md, progress.svg)\n", b.fleetOut)
	if !s.Valid {
		return fmt.Errorf("bench-fleet: a scenario delivered less than it offered: the figures are invalid")
	}
	return nil
}

// options are scale.Options with the flags applied.
func (b benchFlags) options() (scale.Options, error) {
	out, err := filepath.Abs(b.out)
	if err != nil {
		return scale.Options{}, err
	}
	o := scale.DefaultOptions(out)
	if b.etcdFsync < 0 {
		return o, fmt.Errorf("--etcd-fsync: %s is not a flush latency (0 for the topology's default, or more)", b.etcdFsync)
	}
	if b.long {
		o = scale.LongOptions(out)
	}
	if b.steps != "" {
		o.Steps = nil
		for _, f := range strings.Split(b.steps, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 20000 {
				return o, fmt.Errorf("--steps: %q is not a node count from 1 to 20,000", f)
			}
			o.Steps = append(o.Steps, n)
		}
	}
	for _, set := range []struct {
		flag time.Duration
		into []*time.Duration
	}{{b.warmUp, []*time.Duration{&o.WarmUp}}, {b.hold, []*time.Duration{&o.Hold}},
		{b.stormPhase, []*time.Duration{&o.Storm.Quiet, &o.Storm.Storm, &o.Storm.Recovery}}, {b.restartSettle, []*time.Duration{&o.Restart.Settle}}} {
		if set.flag > 0 {
			for _, d := range set.into {
				*d = set.flag
			}
		}
	}
	if b.stormRounds > 0 {
		o.Storm.Rounds = b.stormRounds
	}
	if b.stormNodes > 0 {
		o.Storm.Nodes = b.stormNodes
	}
	if b.restartInformers > 0 {
		o.Restart.Informers = b.restartInformers
	}
	if b.churn > 0 {
		o.ChurnPerSecond = b.churn
	}
	o.LeasesOnly, o.Commit = b.leasesOnly, b.commit
	return o, nil
}

// benchScale runs the scale benchmark on a rehearsal of the stack in dir, stopped at the end.
func benchScale(stack, dir, tools string, b benchFlags) error {
	o, err := b.options()
	if err != nil {
		return err
	}
	c, self, err := loadStack(stack)
	if err != nil {
		return err
	}
	toolsAbs, err := filepath.Abs(tools)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	limits, err := parseCPU(b.cpu)
	if err != nil {
		return err
	}
	s, err := processes.BenchScale(ctx, c, stack, b.topology, machines.Options{Dir: dir, Tools: toolsAbs, Base: benchBase, Self: []string{self}, CPULimits: limits, EtcdFsyncLatency: b.etcdFsync}, o, os.Stdout)
	if err != nil {
		return err
	}
	if o.LeasesOnly {
		for _, c := range s.Costs {
			fmt.Printf("==> %s: %.3f cores + %.3f per 1,000 nodes\n", c.Component, c.BaseCores, c.CoresPer1000Nodes)
		}
	} else {
		fmt.Printf("==> largest node count within the SLOs: %d; storm ratio split %s, unsplit %s\n",
			s.LargestPassingNodes, scale.RatioText(s.StormRatio["split"]), scale.RatioText(s.StormRatio["unsplit"]))
	}
	fmt.Printf("==> took %s; %s\n", s.Took, filepath.Join(o.Out, "report.md"))
	return nil
}

// benchJoins runs the joins benchmark on a rehearsal of the stack in dir, stopped at the end.
func benchJoins(stack, dir, tools string, b benchFlags) error {
	c, self, err := loadStack(stack)
	if err != nil {
		return err
	}
	out, err := filepath.Abs(b.out)
	if err != nil {
		return err
	}
	toolsAbs, err := filepath.Abs(tools)
	if err != nil {
		return err
	}
	o := scale.DefaultJoinOptions(out, joins.PaceOf(c), time.Duration(c.Joins.JitterSeconds())*time.Second)
	if b.joinNodes > 0 {
		o.Nodes = b.joinNodes
	}
	if b.joinRounds > 0 {
		o.Rounds = b.joinRounds
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	rep, err := processes.BenchJoins(ctx, c, machines.Options{Dir: dir, Tools: toolsAbs, Base: benchBase, Self: []string{self}}, o, os.Stdout)
	if err != nil {
		return err
	}
	for _, s := range rep.Summary {
		fmt.Printf("==> %s: mutating p99 median %.2f s (%.2f–%.2f), %d of %d runs within 1 s\n", s.Mode, s.MedianP99, s.MinP99, s.MaxP99, s.Passed, s.Runs)
	}
	fmt.Printf("==> %s\n", filepath.Join(o.Out, "joins.md"))
	return nil
}

// parseCPU reads --cpu: role=cores pairs; empty is nil (the topology's defaults).
func parseCPU(text string) (map[string]float64, error) {
	if text == "" {
		return nil, nil
	}
	limits := map[string]float64{}
	for _, pair := range strings.Split(text, ",") {
		role, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		cores, err := strconv.ParseFloat(v, 64)
		if _, known := processes.CapacityCPU[role]; !ok || !known || err != nil || cores < 0.01 || cores > 1024 {
			return nil, fmt.Errorf("--cpu: %q is not role=cores with a role of %s and cores from 0.01", pair, cpuText(processes.CapacityCPU))
		}
		limits[role] = cores
	}
	return limits, nil
}

// cpuText is limits as --cpu takes them.
func cpuText(limits map[string]float64) string {
	var pairs []string
	for _, role := range slices.Sorted(maps.Keys(limits)) {
		pairs = append(pairs, fmt.Sprintf("%s=%g", role, limits[role]))
	}
	return strings.Join(pairs, ",")
}
