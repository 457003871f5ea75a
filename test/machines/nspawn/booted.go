package nspawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/infra/offline"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/pulumilocal"
	"github.com/clusterforge/clusterforge/test/netns"
	"github.com/clusterforge/clusterforge/test/standin/azuredns"
	"github.com/clusterforge/clusterforge/test/standin/imds"
)

// Options shape a boot: which plan and images, and where it lives.
type Options struct {
	// Stack is the environment: stacks/Pulumi.<Stack>.yaml, planned into PlanDir.
	Stack string
	// Name names the boot's namespaces and cgroups, cfboot-<Name>, so two boots of one stack can
	// run side by side: 1 to 20 of [a-z0-9-]. Default: Stack.
	Name string
	// PlanDir is build/plan/<env>: machines/<role>/user-data and the admin kubeconfig.
	PlanDir string
	// PKIFile is the PKI `make plan` kept (build/plan/<env>.pki.json), for this process's clients.
	PKIFile string
	// Images maps an image role (machine.ImageRoles) to its baked tarball.
	Images map[string]string
	// Dir is build/boot/<env>.
	Dir string
	// Tools is .tools/bin (Azurite).
	Tools string
	// Self is the command that runs `imds` and `lb` (the rehearse binary, or a test binary).
	Self []string
	// KeepOnFailure leaves a boot that failed running, to look at. Default false: it is removed.
	KeepOnFailure bool
}

// Machine is one machine booted from its image: a systemd-nspawn container.
type Machine struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	Image string `json:"image"`
	// Address is the machine's private IP, Zone its availability zone.
	Address string `json:"address"`
	Zone    string `json:"zone"`
	// PID is the container's leader: its systemd, PID 1 inside. 0 while stopped.
	PID int `json:"pid"`
	// Root is the machine's root directory (its OS disk: the image under an overlay).
	Root string `json:"root"`
	// MAC is eth0's hardware address, in Azure's 00:0d:3a range.
	MAC string `json:"mac"`
	// PodIPs are a worker NIC's secondary IP configurations, one per pod (Azure CNI, L29).
	PodIPs []string `json:"podIPs,omitempty"`
	// VMID is the vmId Resource Manager's stand-in gave an instance it created; the boot's own
	// machines have machines.VMID's.
	VMID string `json:"vmId,omitempty"`

	index  int
	prefix netip.Prefix
	nspawn *machines.Proc
}

// Booted is a stack booted as machines: every etcd, apiserver and worker machine of the plan in a
// systemd-nspawn container of its own, started by real systemd and cloud-init from its role's image,
// on a network of namespaces that nothing leaves. Its Layout holds the cluster, the plan's PKI and
// a dialer into that network, so the rehearsal's clients and checks work on it unchanged.
type Booted struct {
	*machines.Layout
	opts     Options
	net      *bootNetwork
	Machines []*Machine
	progress io.Writer

	// mu guards the machines' list (replaced, never edited in place, once booted), their PIDs
	// and the services.
	mu       sync.Mutex
	services []*machines.Proc
	// metadataMu makes one write of the metadata file at a time.
	metadataMu sync.Mutex
	// machinesSocket serves the machines to Resource Manager's stand-in while this process runs.
	machinesSocket net.Listener
}

// Hub names a boot's hub namespace (Options.Name).
func Hub(boot string) string { return "cfboot-" + boot }

// bootName is what a boot's name must be to name namespaces and cgroups.
var bootName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,19}$`)

// placeMachines places every machine of the cluster: the etcd members at their planned addresses and
// zones, apiserver and worker scale-set instances named as Azure names them (the scale set's
// computer-name prefix and a six-digit base-36 instance id), at the next addresses of their
// subnets, spread over the zones, then each worker's pod IPs (deviation "network": Azure's DHCP
// and the scale set's IP configurations pick those addresses).
func placeMachines(c *spec.Cluster) ([]*Machine, error) {
	var out []*Machine
	add := func(name, role, ip, subnet, zone string) error {
		pfx, err := netip.ParsePrefix(subnet)
		if err != nil {
			return err
		}
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return err
		}
		i := len(out)
		out = append(out, &Machine{Name: name, Role: role, Image: machine.ImageOf(role), Address: ip, Zone: zone,
			MAC: macOf(i), index: i, prefix: netip.PrefixFrom(addr, pfx.Bits())})
		return nil
	}
	for _, e := range c.EtcdClusters() {
		for _, m := range e.Members {
			if err := add(m.Name, e.Role, m.IP, c.Network.EtcdSubnet, m.Zone); err != nil {
				return nil, err
			}
		}
	}
	instance := func(prefix string, i int) string { return wellknown.ComputerName(prefix, int64(i)) }
	cp := netip.MustParsePrefix(c.Network.ControlPlaneSubnet).Masked().Addr()
	for i := range c.APIServer.Count {
		ip := addrAdd(cp, machines.APIServerMachineOffset+i)
		if err := add(instance(c.Name+"-"+spec.RoleAPIServer, i), spec.RoleAPIServer, ip.String(), c.Network.ControlPlaneSubnet, c.Zones[i%len(c.Zones)]); err != nil {
			return nil, err
		}
	}
	for _, w := range c.WorkerVNets() {
		next := addrAdd(netip.MustParsePrefix(w.Prefix).Masked().Addr(), azureReservedAddresses)
		first := len(out)
		for _, s := range w.ScaleSets {
			for i := range s.Nodes {
				if err := add(instance(s.AzureName, i), spec.WorkerRole(s.Pool.Name), next.String(), w.Prefix, s.Zones[i%len(s.Zones)]); err != nil {
					return nil, err
				}
				next = next.Next()
			}
		}
		// Each worker NIC's secondary IPs follow its VNet's primary addresses, maxPods apiece.
		for _, m := range out[first:] {
			for range w.Pool.MaxPods {
				m.PodIPs = append(m.PodIPs, next.String())
				next = next.Next()
			}
		}
	}
	return out, nil
}

// azureReservedAddresses are the first addresses of a subnet, which Azure keeps (.0-.3).
const azureReservedAddresses = 4

// macOf is machine i's eth0 address, in Azure's 00:0d:3a range.
func macOf(i int) string {
	return fmt.Sprintf("00:0d:3a:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
}

func addrAdd(a netip.Addr, n int) netip.Addr {
	for range n {
		a = a.Next()
	}
	return a
}

// Boot boots every machine of the stack and returns once the cluster is healthy; on failure it
// removes everything it made. Needs root.
func Boot(ctx context.Context, c *spec.Cluster, o Options, progress io.Writer) (b *Booted, err error) {
	if o.Name == "" {
		o.Name = o.Stack
	}
	if err := Down(o.Name, o.Dir, progress); err != nil {
		return nil, err
	}
	bundle, err := pki.Load(o.PKIFile)
	if err != nil {
		return nil, fmt.Errorf("boot: %w (run `make plan STACK=%s` first)", err, o.Stack)
	}
	placed, err := placeMachines(c)
	if err != nil {
		return nil, err
	}
	b = &Booted{opts: o, Machines: placed, progress: progress, net: newBootNetwork(Hub(o.Name), c)}
	b.Layout = &machines.Layout{Cluster: c, Bundle: bundle, Options: machines.Options{
		Dir: o.Dir, Tools: o.Tools, Self: o.Self, Dial: netns.Resolving(netns.DialerIn(netnsPath(b.net.Hub)), net.JoinHostPort(azuredns.Address, "53")), StoreHost: bootStoreHost(c),
	}}
	for _, m := range placed {
		b.Instances = append(b.Instances, machines.Instance{Name: m.Name, Role: m.Role, IP: m.Address})
	}
	defer func() {
		if err != nil && o.KeepOnFailure {
			b.SaveJournals()
			b.logf("failed; the machines stay for inspection (journals in %s); remove them with `make boot-down`", b.LogDir())
			return
		}
		if err != nil {
			b.SaveJournals()
			b.logf("failed; removing what was made (journals and logs stay in %s)", b.LogDir())
			_ = b.Down()
			b = nil
		}
	}()
	began := time.Now()
	if err := b.prepare(); err != nil {
		return b, err
	}
	b.logf("network: namespace %s, VNets %v, and %v", b.net.Hub, b.net.VNets, b.net.Extra)
	if err := b.startServices(ctx); err != nil {
		return b, err
	}
	if err := b.startHostAccess(ctx); err != nil {
		return b, err
	}
	phase := time.Now()
	if err := b.unpackImages(ctx); err != nil {
		return b, err
	}
	phase = b.phase("image unpack", phase)
	if err := b.each(b.Machines, func(m *Machine) error { return b.create(m) }); err != nil {
		return b, err
	}
	if err := b.each(b.Machines, func(m *Machine) error { return b.Start(ctx, m.Name) }); err != nil {
		return b, err
	}
	b.logf("%d machines running systemd", len(b.Machines))
	phase = b.phase("machine boot", phase)
	if err := b.each(b.Machines, func(m *Machine) error { return b.waitCloudInit(ctx, m.Name) }); err != nil {
		if errors.Is(err, ErrCloudInitStuck) {
			err = fmt.Errorf("%w\n%s", err, machines.BusiestProcesses(3*time.Second, 12))
		}
		return b, err
	}
	b.logf("cloud-init done on every machine, no errors")
	phase = b.phase("cloud-init", phase)
	if err := b.waitCluster(ctx); err != nil {
		return b, err
	}
	b.phase("cluster ready", phase)
	b.logf("up in %.1fs", time.Since(began).Seconds())
	return b, nil
}

// phase reports how long a phase of the boot took, for people and scripts/bench-boot.sh.
func (b *Booted) phase(name string, began time.Time) time.Time {
	b.logf("phase %s: %.1fs", name, time.Since(began).Seconds())
	return time.Now()
}

// prepare writes the deviations, the kubeconfig and the client PKI, and makes the network.
func (b *Booted) prepare() error {
	if err := os.MkdirAll(b.LogDir(), 0o755); err != nil {
		return err
	}
	if err := b.WriteDeviations(true); err != nil {
		return err
	}
	kubeconfig, err := os.ReadFile(filepath.Join(b.opts.PlanDir, "kubeconfig"))
	if err != nil {
		return fmt.Errorf("boot: %w (run `make plan STACK=%s` first)", err, b.opts.Stack)
	}
	if err := machines.WriteFile(b.Kubeconfig(), string(kubeconfig), 0o600); err != nil {
		return err
	}
	for _, role := range []string{spec.RoleEtcdMain, spec.RoleEtcdEvents, spec.RoleAPIServer} {
		if _, err := os.Stat(b.userData(role)); err != nil {
			return fmt.Errorf("boot: %w (run `make plan STACK=%s` first)", err, b.opts.Stack)
		}
	}
	if err := b.net.create(); err != nil {
		return err
	}
	for _, m := range b.Machines {
		if err := b.net.attach(m.index, m.prefix, m.MAC, m.PodIPs); err != nil {
			return err
		}
	}
	return nil
}

// publicNames are the records of Azure DNS's stand-in: the public host names of the services the
// cluster calls, to their stand-ins' addresses.
func publicNames() map[string]string {
	return map[string]string{
		hostOf(azurecloud.Public.AuthorityHost): entraAddr.String(), hostOf(azurecloud.Public.ResourceManagerEndpoint): armAddr.String(),
		imds.IssuerHost: wellknown.IMDSAddress,
	}
}

// bootStoreHost is where the backup store listens: the etcd subnet's gateway address, on the hub.
func bootStoreHost(c *spec.Cluster) string {
	return netip.MustParsePrefix(c.Network.EtcdSubnet).Masked().Addr().Next().String()
}

func (b *Booted) userData(role string) string {
	return offline.UserDataPath(b.opts.PlanDir, role)
}

// ScheduledEventsFile is what the metadata stand-in serves as each machine's scheduled events:
// JSON, machine address → maintenance.Document, read at each request; absent means none.
func (b *Booted) ScheduledEventsFile() string { return filepath.Join(b.Dir, "scheduled-events.json") }

// startServices starts, in the hub namespace, the stand-ins for Azure's platform: the internal
// load balancer, the backup store, Azure DNS, Entra ID, the instance metadata service (attested documents,
// the machines' identities' tokens) and Resource Manager.
func (b *Booted) startServices(ctx context.Context) error {
	if err := b.writeMetadata(); err != nil {
		return err
	}
	if err := b.startService("lb", b.LBCommand()); err != nil {
		return err
	}
	if err := b.startService("azurite", b.StoreCommand()); err != nil {
		return err
	}
	dns := append(slices.Clone(b.Self), "azure-dns")
	for name, addr := range publicNames() {
		dns = append(dns, "--record="+name+"="+addr)
	}
	if err := b.startService("azure-dns", dns); err != nil {
		return err
	}
	if err := b.startEntra(); err != nil {
		return err
	}
	// After Entra ID's: the machines' identities' tokens are signed with its key.
	if err := imds.WriteSigningChain(b.attestationDir()); err != nil {
		return err
	}
	if err := b.startService("imds", append(slices.Clone(b.Self), "imds", "--listen="+wellknown.IMDSAddress+":80", "--machines="+b.metadataFile(),
		"--events="+b.ScheduledEventsFile(), "--attestation-dir="+b.attestationDir(), "--tenant="+machines.RehearsalTenantID,
		"--token-key="+b.entraSigningKey())); err != nil {
		return err
	}
	if err := b.startARM(); err != nil {
		return err
	}
	b.logf("platform stand-ins in %s: instance metadata on %s, load balancer on %s, backup store (Azurite) on %s, Azure DNS on %s, Entra ID (%s) on %s, Resource Manager (%s) on %s",
		b.net.Hub, wellknown.IMDSAddress, b.Cluster.APIServerURL(), b.StoreAddress(), azuredns.Address, b.AuthorityHost(), entraAddr, b.Cloud().ResourceManagerEndpoint, armAddr)
	return b.CreateBackupContainers(ctx)
}

// attestationDir holds the chain the metadata stand-in signs attested documents with.
func (b *Booted) attestationDir() string { return filepath.Join(b.Dir, "attestation") }

// metadata is what the instance metadata service says of a machine.
func (b *Booted) metadata(m *Machine) imds.InstanceMetadata {
	c := b.Cluster
	size := c.APIServer.VMSize
	switch m.Role {
	case spec.RoleEtcdMain:
		size = c.EtcdMain.VMSize
	case spec.RoleEtcdEvents:
		size = c.EtcdEvents.VMSize
	}
	if p, ok := c.PoolOfRole(m.Role); ok {
		size = p.VMSize
	}
	var identities []string
	if id, ok := machines.RehearsalClientIDs()[m.Role]; ok {
		identities = []string{id}
	}
	subnet := m.prefix.Masked()
	vmID := m.VMID
	if vmID == "" {
		vmID = machines.VMID(m.Name)
	}
	return imds.InstanceMetadata{Name: m.Name, ResourceID: machines.ResourceID(c, m.Role, m.Name), VMID: vmID, Zone: m.Zone,
		Location: c.Location, VMSize: size, PrivateIP: m.Address, SubnetAddress: subnet.Addr().String(), SubnetPrefix: subnet.Bits(), Identities: identities}
}

// startService runs argv in the hub namespace, detached: it outlives this command until Down.
func (b *Booted) startService(name string, argv []string) error {
	proc, err := machines.SpawnProcess(append([]string{"ip", "netns", "exec", b.net.Hub}, argv...), os.Environ(), b.Dir,
		filepath.Join(b.LogDir(), name+".log"), false)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	proc.Role, proc.Machine, proc.Name, proc.Command = "platform", b.net.Hub, name, argv // `ip netns exec` execs argv
	return b.track(proc)
}

// track records a process the boot started in its endpoints file, for `make boot-down`.
func (b *Booted) track(proc *machines.Proc) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.services = append(b.services, proc)
	return machines.WriteEndpoints(b.EndpointsFile(), b.services)
}

// each runs f for every machine at once and joins the errors.
func (b *Booted) each(ms []*Machine, f func(*Machine) error) error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(m); err != nil {
				errs[i] = fmt.Errorf("%s: %w", m.Name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (b *Booted) logf(format string, args ...any) {
	if b.progress != nil {
		fmt.Fprintf(b.progress, "==> "+format+"\n", args...)
	}
}

// Machine returns the named machine.
func (b *Booted) Machine(name string) (*Machine, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.Machines {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("boot: no machine %q", name)
}

// writeMachines records every machine in machines.json.
func (b *Booted) writeMachines() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, err := json.MarshalIndent(b.Machines, "", "  ")
	if err != nil {
		return err
	}
	return machines.WriteFile(MachinesFile(b.Dir), string(data)+"\n", 0o644)
}

// MachinesFile lists a boot's machines.
func MachinesFile(dir string) string { return filepath.Join(dir, "machines.json") }

// Exec runs a command on a machine (all of its namespaces, its root) and returns its output.
func (b *Booted) Exec(ctx context.Context, name string, args ...string) (string, error) {
	m, err := b.Machine(name)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	pid := m.PID
	b.mu.Unlock()
	if pid == 0 {
		return "", fmt.Errorf("%s is stopped", name)
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(pid), "--all"}, args...)...)
	cmd.Env = []string{nodePath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %w: %s", strings.Join(args, " "), name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ErrCloudInitStuck is a boot whose cloud-init was still running when the wait ended.
var ErrCloudInitStuck = errors.New("cloud-init did not finish")

// cloudInitResultFile is the file cloud-init writes when its last stage ends, read from the host
// through the machine's root: polling `cloud-init status` instead starts a Python process per
// machine and poll, which on two cores starved the boots it waited for.
const cloudInitResultFile = "run/cloud-init/result.json"

// waitCloudInit waits until cloud-init has finished on a machine and fails if it reported errors.
func (b *Booted) waitCloudInit(ctx context.Context, name string) error {
	m, err := b.Machine(name)
	if err != nil {
		return err
	}
	err = machines.Poll(ctx, 5*time.Minute, name+" cloud-init", func(ctx context.Context) error {
		b.mu.Lock()
		pid := m.PID
		b.mu.Unlock()
		if pid == 0 {
			return machines.Permanent{Err: fmt.Errorf("%s stopped while cloud-init ran", name)}
		}
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "root", cloudInitResultFile))
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w\n%s", ErrCloudInitStuck, err, b.Diagnose(name))
	}
	if err != nil {
		return err
	}
	// The result is written as the last stage ends; its unit may still be stopping.
	return machines.Poll(ctx, time.Minute, name+" cloud-init status", func(ctx context.Context) error {
		out, err := b.Exec(ctx, name, "cloud-init", "status", "--long")
		if strings.Contains(out, "status: running") {
			return errors.New(strings.Join(strings.Fields(out), " "))
		}
		if !strings.Contains(out, "status:") {
			return err
		}
		if err := cloudInitResult(out); err != nil {
			return machines.Permanent{Err: err}
		}
		return nil
	})
}

// Diagnose says what a machine that does not come up waits for (systemd's queued jobs, failed
// units, the end of cloud-init's log and of each named unit's journal) and how loaded this host
// is, so that a failed run's output names the cause even where its logs are gone.
func (b *Booted) Diagnose(name string, units ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type probe struct {
		what string
		argv []string
	}
	probes := []probe{
		{"queued jobs", []string{"systemctl", "list-jobs", "--no-pager", "--no-legend"}},
		{"failed units", []string{"systemctl", "--failed", "--no-pager", "--no-legend"}},
		{"cloud-init.log", []string{"tail", "-n", "3", "/var/log/cloud-init.log"}},
		{"processes by CPU time", []string{"sh", "-c", "ps -eo pid,stat,etime,time,wchan:16,args --sort=-time | head -n 6"}},
	}
	for _, u := range units {
		probes = append(probes, probe{u, []string{"journalctl", "--no-pager", "--output=short-precise", "-n", "12", "-u", u}})
	}
	var out strings.Builder
	for _, p := range probes {
		text, err := b.Exec(ctx, name, p.argv...)
		if err != nil {
			text = err.Error()
		}
		fmt.Fprintf(&out, "    %s %s: %s\n", name, p.what, strings.ReplaceAll(strings.TrimSpace(text), "\n", "\n      "))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&out, "    this host: load %s", strings.TrimSpace(string(load)))
	return out.String()
}

func cloudInitResult(out string) error {
	if !strings.Contains(out, "status: done") {
		return fmt.Errorf("cloud-init failed:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if (strings.HasPrefix(line, "errors:") || strings.HasPrefix(line, "recoverable_errors:")) &&
			!strings.HasSuffix(line, "[]") && !strings.HasSuffix(line, "{}") {
			return fmt.Errorf("cloud-init finished with errors:\n%s", out)
		}
	}
	return nil
}

// SaveJournals writes each running machine's journal and failed units to logs/<machine>.journal.log.
func (b *Booted) SaveJournals() {
	_ = b.each(b.Machines, func(m *Machine) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		failed, _ := b.Exec(ctx, m.Name, "systemctl", "--failed", "--no-pager")
		journal, _ := b.Exec(ctx, m.Name, "journalctl", "--boot", "--no-pager")
		return machines.WriteFile(filepath.Join(b.LogDir(), m.Name+".journal.log"), failed+"\n"+journal, 0o644)
	})
}

// WaitAPIHealthy waits for every apiserver and the load balancer, and asks each machine's
// controller-manager and scheduler on 127.0.0.1, where they listen.
func (b *Booted) WaitAPIHealthy(ctx context.Context) error {
	return b.WaitAPIHealthyWith(ctx, func(ctx context.Context, in machines.Instance, port int) error {
		_, err := b.Exec(ctx, in.Name, "curl", "-fsSk", "--max-time", "5", fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		return err
	})
}

// waitCluster waits until both etcd clusters are healthy, every apiserver is ready behind the load
// balancer and the controller-manager and scheduler hold their leases; then applies the foundation
// the workers join with, waits for them, and applies the add-ons.
func (b *Booted) waitCluster(ctx context.Context) error {
	for _, role := range []string{spec.RoleEtcdMain, spec.RoleEtcdEvents} {
		if err := b.WaitEtcdHealthy(ctx, role); err != nil {
			return err
		}
	}
	b.logf("etcd healthy: %d %s and %d %s members", len(b.Of(spec.RoleEtcdMain)), spec.RoleEtcdMain, len(b.Of(spec.RoleEtcdEvents)), spec.RoleEtcdEvents)
	if err := b.WaitAPIHealthy(ctx); err != nil {
		return err
	}
	if err := b.ApplyFoundation(ctx); err != nil {
		return err
	}
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		if err := machines.Poll(ctx, 2*time.Minute, lease+" lease", func(ctx context.Context) error {
			_, err := b.LeaseMachine(ctx, lease)
			return err
		}); err != nil {
			return err
		}
	}
	b.logf("control plane ready behind the load balancer; controller-manager and scheduler hold their leases")
	var workers []*Machine
	for _, m := range b.Machines {
		if m.Image == machine.ImageWorker {
			workers = append(workers, m)
		}
	}
	if err := b.each(workers, func(m *Machine) error { return b.waitNodeReady(ctx, m.Name) }); err != nil {
		return err
	}
	b.logf("%d workers joined (attested, through the load balancer) and are Ready with their pool labels", len(workers))
	stackFile, err := pulumilocal.StackFile(b.Cluster)
	if err != nil {
		return err
	}
	return b.applyAddons(ctx, stackFile)
}

// waitNodeReady waits until the worker machine's node is Ready and carries its pool's label, which
// the CSR approver sets.
func (b *Booted) waitNodeReady(ctx context.Context, name string) error {
	m, err := b.Machine(name)
	if err != nil {
		return err
	}
	pool, _ := b.Cluster.PoolOfRole(m.Role)
	cs, err := b.Clientset()
	if err != nil {
		return err
	}
	return machines.Poll(ctx, 3*time.Minute, name+" node", func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		switch got := n.Labels[wellknown.PoolLabel]; {
		case got == "": // the CSR approver labels the Node once it registers
			return fmt.Errorf("no %s label yet", wellknown.PoolLabel)
		case got != pool.Name:
			return machines.Permanent{Err: fmt.Errorf("node label %s=%q, want %q", wellknown.PoolLabel, got, pool.Name)}
		}
		return nodestatus.Ready(n, time.Now())
	})
}
