// Command rehearse starts a stack's control plane for real on this machine (see package test/machines/processes):
//
//	rehearse up --stack dev           start it, wait until healthy, leave it running
//	rehearse down --stack dev         stop everything `up` started; keep its disks, PKI and backups
//	rehearse clean --stack dev        stop it and delete everything, backups included
//	rehearse etcd-backup --stack dev  snapshot the main etcd to the backup store now
//	rehearse etcd-restore --stack dev [--snapshot NAME]   restore the main etcd (latest snapshot by default)
//	rehearse diff --stack dev         what the stack file changes against what the rehearsal last applied
//	rehearse roll --stack dev [--renew-certificates]   roll the rehearsal's machines onto the stack file
//	rehearse releases --stack dev     the scripts/toolchain.sh groups the stack's versions need
//	rehearse deviations               list every difference from Azure
//	rehearse e2e-times [--docs docs/testing.md]   where make e2e's time went (build/e2e-times.json, .md)
//	rehearse boot --stack dev [--serve-machines]   boot every machine of the plan from its image (systemd-nspawn), leave it running
//	rehearse boot-down --stack dev    remove every machine, mount, loop device and namespace `boot` made
//	rehearse bench-scale --stack dev  the scale benchmark on a rehearsal of its own (build/bench/scale)
//	rehearse bench-joins --stack dev  1,000 nodes joining all at once vs in the stack's steps (build/bench/joins)
//	rehearse bench-fleet --stack prod-10k   rolls, growth and repairs against Resource Manager's stand-in (build/bench/fleet)
//
// `up` leaves a supervisor behind (`rehearse serve`, pid in <dir>/rehearse.pid) that restarts
// failed services as systemd would, until `down`; etcd-backup and etcd-restore ask it to act on
// its machines through <dir>/control.sock.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/nspawn"
	"github.com/clusterforge/clusterforge/test/machines/processes"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rehearse:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: rehearse up|down|clean|diff|roll|releases|etcd-backup|etcd-restore|boot|boot-down|services|bench-scale|bench-joins|bench-fleet|deviations|e2e-times [--stack <env>] [flags]")
	}
	if ran, err := machines.Subcommand(args); ran {
		return err
	}
	verb, args := args[0], args[1:]
	switch verb {
	case "deviations":
		fmt.Print(machines.FormatDeviations(false) + "\n" + machines.FormatDeviations(true))
		return nil
	case "e2e-times":
		return e2eTimes(args)
	}
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	stack := fs.String("stack", "dev", "stack name: stacks/Pulumi.<stack>.yaml")
	build := fs.String("build", "build/rehearse", "directory for rehearsals; each stack gets <build>/<stack>")
	tools := fs.String("tools", ".tools/bin", "directory of the pinned binaries (make tools)")
	nodes := fs.Int("nodes-per-pool", 3, "KWOK nodes simulated per pool, at most the pool's maxNodes")
	snapshot := fs.String("snapshot", os.Getenv("SNAPSHOT"), "etcd-restore: the snapshot to restore (default: $SNAPSHOT, else the latest)")
	bootDir := fs.String("boot-dir", "build/boot", "boot, boot-down: directory for booted stacks; each gets <boot-dir>/<stack>")
	planDir := fs.String("plan-dir", "build/plan", "boot: where `make plan` wrote <stack>/ and <stack>.pki.json")
	keep := fs.Bool("keep-on-failure", false, "boot: leave a boot that failed running, to look at")
	hold := fs.Bool("serve-machines", false, "boot: stay until interrupted, holding the machines behind Resource Manager's stand-in: a scale set's growth boots workers that join, a deleted instance's machine goes")
	images := fs.String("images", "build/images", "boot: where the baked images are: node-<stack>.tar, control-plane-<stack>.tar")
	renew := fs.Bool("renew-certificates", false, "roll: renew every leaf certificate, due or not")
	var bench benchFlags
	bench.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := filepath.Abs(filepath.Join(*build, *stack))
	if err != nil {
		return err
	}
	switch verb {
	case "boot", "boot-down", "services":
		bootDir, err := filepath.Abs(filepath.Join(*bootDir, *stack))
		if err != nil {
			return err
		}
		switch verb {
		case "boot-down":
			return nspawn.Down(*stack, bootDir, os.Stdout)
		case "services":
			return services(*stack, bootDir, *tools, fs.Args())
		}
		return boot(*stack, bootDir, *planDir, *images, *tools, *keep, *hold)
	case "down":
		return down(dir)
	case "clean":
		if err := down(dir); err != nil {
			return err
		}
		fmt.Printf("==> deleting %s (machines, PKI, backup store)\n", dir)
		return processes.Clean(dir, os.Stdout)
	case "etcd-backup":
		return processes.Control(dir, processes.Request{Op: verb})
	case "diff":
		return diff(*stack, dir, *tools)
	case "roll":
		// The supervisor owns the machines, so it rolls them.
		return processes.Control(dir, processes.Request{Op: verb, Stack: spec.StackFile(spec.StackDir, *stack), Renew: *renew})
	case "etcd-restore":
		err := processes.Control(dir, processes.Request{Op: verb, Snapshot: *snapshot})
		if errors.Is(err, processes.ErrNotRunning) {
			return restoreStopped(*stack, dir, *tools, *nodes, *snapshot)
		}
		return err
	case "up":
		return up(*stack, dir, *tools, args)
	case "releases":
		// What the stack file names, and what a rehearsal started as last applied runs.
		c, _, err := loadStack(*stack)
		if err != nil {
			return err
		}
		groups := processes.Releases(c.Versions)
		if _, applied := processes.PendingRoll(dir, c); applied != nil {
			groups = append(groups, processes.Releases(applied.Versions)...)
		}
		slices.Sort(groups)
		fmt.Println(strings.Join(slices.Compact(groups), " "))
		return nil
	case "serve":
		return serve(*stack, dir, *tools, *nodes)
	case "bench-scale":
		return benchScale(*stack, dir+"-scale", *tools, bench)
	case "bench-joins":
		return benchJoins(*stack, dir+"-scale", *tools, bench)
	case "bench-fleet":
		return benchFleet(*stack, bench)
	}
	return fmt.Errorf("unknown verb %q: use up, down, clean, diff, roll, releases, etcd-backup, etcd-restore, boot, boot-down, services, bench-scale, bench-joins, bench-fleet, deviations, e2e-times, lb or imds", verb)
}

// diff prints what the stack file changes against what the running rehearsal last applied.
func diff(stack, dir, tools string) error {
	if !processes.Running(dir) {
		return fmt.Errorf("no rehearsal of %s runs in %s: start one with make rehearse STACK=%s", stack, dir, stack)
	}
	desired, err := spec.LoadStack(spec.StackFile(spec.StackDir, stack))
	if err != nil {
		return err
	}
	p, err := processes.Attach(dir, tools)
	if err != nil {
		return err
	}
	applied, err := p.Applied()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return roll.Diff(ctx, os.Stdout, p, applied, desired, spec.StackFile(spec.StackDir, stack),
		"the rehearsal in "+dir, "make roll STACK="+stack)
}

// up starts `rehearse serve` in its own session and relays its progress until it is ready. Over
// an existing rehearsal it applies what changes in place and refuses, as `pulumi up` does, what
// needs a roll: a running rehearsal is left as it is, a stopped one starts as last applied.
func up(stack, dir, tools string, args []string) error {
	c, _, err := loadStack(stack)
	if err != nil {
		return err
	}
	var refused error
	if changes, _ := processes.PendingRoll(dir, c); len(changes) > 0 {
		var fields []string
		for _, ch := range changes {
			fields = append(fields, fmt.Sprintf("%s (%s -> %s: %s)", ch.Field, ch.From, ch.To, ch.Class))
		}
		refused = fmt.Errorf("refused: the stack file changes what machines run: %s; the rehearsal runs as last applied: "+
			"see `make diff STACK=%s`, then `make roll STACK=%s` for what a roll applies", strings.Join(fields, ", "), stack, stack)
		if processes.Running(dir) {
			return refused
		}
		fmt.Printf("==> the stack file changes what machines run: starting the rehearsal of %s as last applied\n", stack)
	}
	if err := down(dir); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(dir, "rehearse.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	progress, progressW, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{"serve"}, args...)...)
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = logFile, logFile, []*os.File{progressW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	progressW.Close()
	if err := os.WriteFile(pidFile(dir), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	lines := bufio.NewScanner(progress)
	for lines.Scan() {
		if lines.Text() == readyLine {
			printTry(stack, dir, tools)
			return refused
		}
		fmt.Println(lines.Text())
	}
	_ = cmd.Wait()
	return fmt.Errorf("the rehearsal did not come up; see %s and %s", logFile.Name(), filepath.Join(dir, "logs"))
}

const readyLine = "READY"

func pidFile(dir string) string { return filepath.Join(dir, "rehearse.pid") }

// down stops the supervisor, which stops its processes, then sweeps whatever is left.
func down(dir string) error {
	if data, err := os.ReadFile(pidFile(dir)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && syscall.Kill(pid, syscall.SIGTERM) == nil {
			fmt.Printf("==> stopping the rehearsal in %s (supervisor pid %d)\n", dir, pid)
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil; {
				time.Sleep(50 * time.Millisecond)
			}
		}
		_ = os.Remove(pidFile(dir))
	}
	return processes.StopDir(dir, os.Stdout)
}

// serve brings the rehearsal up, reports on fd 3, and supervises it until SIGTERM.
func serve(stack, dir, tools string, nodes int) error {
	progress := os.NewFile(3, "progress")
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	r, err := start(ctx, stack, dir, tools, nodes, io.MultiWriter(progress, os.Stdout))
	if err != nil {
		fmt.Fprintln(progress, "error:", err)
		return err
	}
	ln, err := listenControl(ctx, dir, r)
	if err != nil {
		_ = r.Down()
		return err
	}
	defer ln.Close()
	fmt.Fprintln(progress, readyLine)
	progress.Close()
	<-ctx.Done()
	return r.Down()
}

// loadStack reads the stack's file and names this binary, which the rehearsal runs again as its
// load balancer and metadata service.
func loadStack(stack string) (*spec.Cluster, string, error) {
	c, err := spec.LoadStack(spec.StackFile(spec.StackDir, stack))
	if err != nil {
		return nil, "", err
	}
	self, err := os.Executable()
	return c, self, err
}

// layout renders the stack's rehearsal in dir.
func layout(stack, dir, tools string, nodes int) (*processes.Layout, error) {
	c, self, err := loadStack(stack)
	if err != nil {
		return nil, err
	}
	// Machines keep what they were last applied with until a roll replaces them, as on Azure.
	if _, applied := processes.PendingRoll(dir, c); applied != nil {
		c = applied
	}
	toolsAbs, err := filepath.Abs(tools)
	if err != nil {
		return nil, err
	}
	return processes.NewLayout(c, machines.Options{Dir: dir, Tools: toolsAbs, NodesPerPool: nodes, Self: []string{self}})
}

// restoreStopped restores the main etcd of a rehearsal that is down, for the next `up`.
func restoreStopped(stack, dir, tools string, nodes int, snapshot string) error {
	p, err := layout(stack, dir, tools, nodes)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fmt.Printf("==> no rehearsal of %s runs: restoring its stopped machines\n", stack)
	snap, err := processes.RestoreStopped(ctx, p, snapshot, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("==> restored from %s (revision %d); start it with: make rehearse STACK=%s\n", snap.Name, snap.Revision, stack)
	return nil
}

func start(ctx context.Context, stack, dir, tools string, nodes int, progress io.Writer) (*processes.Rehearsal, error) {
	p, err := layout(stack, dir, tools, nodes)
	if err != nil {
		return nil, err
	}
	fmt.Fprint(progress, machines.FormatDeviations(false))
	upCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	r, err := processes.Up(upCtx, p, progress)
	if err != nil {
		return nil, err
	}
	results, err := p.CIS(upCtx)
	if err != nil {
		_ = r.Down()
		return nil, err
	}
	counts := map[string]int{}
	for _, res := range results {
		counts[res.Status]++
	}
	fmt.Fprintf(progress, "==> CIS %s (kube-bench, master and etcd): %d pass, %d fail, %d warn; report in %s (docs/reference/cis-exceptions.md lists the accepted exceptions)\n",
		processes.CISBenchmark, counts["PASS"], counts["FAIL"], counts["WARN"], filepath.Join(dir, "cis.txt"))
	objs, err := p.Addons()
	if err == nil {
		err = r.Apply(upCtx, objs...)
	}
	if err != nil {
		_ = r.Down()
		return nil, err
	}
	fmt.Fprintf(progress, "==> applied %d add-on objects (server-side apply, as the services program registers them)\n", len(objs))
	return r, nil
}

func printTry(stack, dir, tools string) {
	kubeconfig, endpoints := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "endpoints.json")
	rel := func(path string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, path); err == nil {
				return r
			}
		}
		return path
	}
	fmt.Printf(`
Stack %s is running on loopback.
  kubeconfig:  %s
  processes:   %s   (logs in %s)
Try:
  export KUBECONFIG=%s
  %s/kubectl get nodes -L %s
  %s/kubectl -n kube-system get leases
Stop it with: make rehearse-down STACK=%s
`, stack, rel(kubeconfig), rel(endpoints), rel(filepath.Join(dir, "logs")), rel(kubeconfig), tools, wellknown.PoolLabel, tools, stack)
}

// services runs the Pulumi CLI (args) on the cluster services stack of the booted stack, with
// the stack file as it is now: what `make up` and `make preview` do.
func services(stack, dir, tools string, args []string) error {
	if _, err := os.Stat(nspawn.MachinesFile(dir)); err != nil {
		return fmt.Errorf("no booted %s here (%s): `make boot STACK=%s` first", stack, nspawn.MachinesFile(dir), stack)
	}
	stackFile, err := os.ReadFile(spec.StackFile(spec.StackDir, stack))
	if err != nil {
		return err
	}
	be, err := nspawn.OpenPulumi(tools, dir, stack)
	if err != nil {
		return err
	}
	if err := be.WriteServices(stackFile); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	return be.Pulumi(ctx, os.Stdout, args...)
}

// boot boots every machine of the stack's plan and leaves them running.
func boot(stack, dir, planDir, images, tools string, keep, hold bool) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("boot needs root: it mounts, makes loop devices and network namespaces, and runs systemd-nspawn")
	}
	// Booting again starts every machine afresh: a cluster's etcd data is not lost without a word.
	if _, err := os.Stat(nspawn.MachinesFile(dir)); err == nil {
		return fmt.Errorf("refused: a booted %s is here (%s); booting again would start it afresh and lose its etcd data: "+
			"remove it first with `make boot-down STACK=%s`", stack, nspawn.MachinesFile(dir), stack)
	}
	c, self, err := loadStack(stack)
	if err != nil {
		return err
	}
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	o := nspawn.Options{
		Stack: stack, Dir: dir, Tools: abs(tools), Self: []string{self}, KeepOnFailure: keep,
		PlanDir: abs(filepath.Join(planDir, stack)), PKIFile: abs(filepath.Join(planDir, stack+".pki.json")),
		Images: map[string]string{
			machine.ImageWorker:       abs(filepath.Join(images, "node-"+stack+".tar")),
			machine.ImageControlPlane: abs(filepath.Join(images, "control-plane-"+stack+".tar")),
		},
	}
	fmt.Print(machines.FormatDeviations(true))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	bootCtx, cancelTimeout := context.WithTimeout(ctx, 15*time.Minute)
	defer cancelTimeout()
	b, err := nspawn.Boot(bootCtx, c, o, os.Stdout)
	if err != nil {
		return err
	}
	if usage, err := b.MemoryUsage(); err == nil {
		for _, m := range b.Machines {
			fmt.Printf("==> memory %s %s %d MiB\n", m.Role, m.Name, usage[m.Name]>>20)
		}
	}
	rel := func(path string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, path); err == nil {
				return r
			}
		}
		return path
	}
	fmt.Printf("\nStack %s is booted: %d machines, listed in %s.\nTry: %s/kubectl --kubeconfig %s get nodes -o wide\nRemove it with: make boot-down STACK=%s\n",
		stack, len(b.Machines), rel(nspawn.MachinesFile(dir)), tools, rel(b.HostKubeconfig()), stack)
	if !hold {
		return nil
	}
	fmt.Println("Holding the machines behind Resource Manager's stand-in until interrupted (Ctrl-C); the machines stay after.")
	<-ctx.Done()
	b.CloseMachines()
	return nil
}
