// Package rollazure is `make roll`'s Azure executor: the roll.Roller the rehearsal drills, acting
// on Azure. An etcd member's VM is replaced by a Pulumi update through the Automation API that
// targets that VM alone, with parallelism 1 and the member's protection lifted by the rollStep
// config; scale-set instances (apiservers, workers) are brought to their scale set's latest
// model and reimaged through armcompute, latestModelApplied being the drift signal. The
// cluster itself (etcd, the API, the nodes) is reached from the hub with the stack's outputs.
package rollazure

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/certexpiry"
	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/infra/azure"
	"github.com/clusterforge/clusterforge/infra/program"
)

// Stack is what a roll does with the Pulumi stack; *auto.Stack is one.
type Stack interface {
	SetConfig(ctx context.Context, key string, val auto.ConfigValue) error
	RemoveConfig(ctx context.Context, key string) error
	Up(ctx context.Context, opts ...optup.Option) (auto.UpResult, error)
}

// Clients are the Azure APIs the executor calls.
type Clients struct {
	ScaleSets   *armcompute.VirtualMachineScaleSetsClient
	ScaleSetVMs *armcompute.VirtualMachineScaleSetVMsClient
	VMs         *armcompute.VirtualMachinesClient
	NICs        *armnetwork.InterfacesClient
}

// Access is how the executor reaches the cluster from the hub, from the stack's outputs.
type Access struct {
	// REST is the admin's client configuration (the kubeconfig output), through the load balancer.
	REST *rest.Config
	// Etcd is the etcd client pair (the etcdClient output); APIServer trusts the cluster CA
	// and presents the admin's pair, to ask one apiserver machine directly.
	Etcd, APIServer *tls.Config
	// Dial opens connections; nil is the host's network.
	Dial certexpiry.Dialer
}

// Target is one Azure cluster as a roll acts on it.
type Target struct {
	// Cluster is the desired spec.
	Cluster *spec.Cluster
	// StackName and Project form the URNs a member's replacement targets.
	StackName, Project string
	// Stack is the infrastructure's stack; Services the cluster services' of the same name, which
	// applies the desired spec's add-ons.
	Stack, Services Stack
	Azure           Clients
	Access          Access
	// Progress receives the Pulumi updates' output.
	Progress io.Writer
	// AppliedBy is the clusterforge that applied the stack last (program.AppliedByOutput); empty
	// for one applied before it was recorded.
	AppliedBy string

	// heldRepairs: this roll suspended the apiservers' automatic repairs and resumes them.
	heldRepairs bool
}

var (
	_ roll.Target      = (*Target)(nil)
	_ roll.ModelTarget = (*Target)(nil)
)

// Inventory lists the etcd members by their fixed names, the apiserver scale set's instances by
// VM name, and each pool's nodes.
func (t *Target) Inventory(ctx context.Context) (change.Inventory, error) {
	inv := change.Inventory{}
	for _, e := range t.Cluster.EtcdClusters() {
		for _, m := range e.Members {
			inv[e.Role] = append(inv[e.Role], m.Name)
		}
	}
	vms, err := t.instances(ctx, apiserverScaleSet(t.Cluster))
	if err != nil {
		return nil, err
	}
	for _, vm := range vms {
		inv[spec.RoleAPIServer] = append(inv[spec.RoleAPIServer], *vm.Name)
	}
	return roll.AddNodes(ctx, t, inv)
}

func apiserverScaleSet(c *spec.Cluster) string { return c.Name + "-" + spec.RoleAPIServer }

// scaleSets are every scale set of the cluster: the apiservers' and the pools'.
func scaleSets(c *spec.Cluster) []string {
	out := []string{apiserverScaleSet(c)}
	for _, s := range c.ScaleSets() {
		out = append(out, s.AzureName)
	}
	return out
}

func (t *Target) instances(ctx context.Context, scaleSet string) ([]*armcompute.VirtualMachineScaleSetVM, error) {
	var out []*armcompute.VirtualMachineScaleSetVM
	pager := t.Azure.ScaleSetVMs.NewListPager(t.Cluster.ResourceGroup(), scaleSet, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", scaleSet, err)
		}
		out = append(out, page.Value...)
	}
	return out, nil
}

// instance finds a scale-set instance by VM name or by computer name (a node's name).
func (t *Target) instance(ctx context.Context, name string) (scaleSet string, vm *armcompute.VirtualMachineScaleSetVM, err error) {
	for _, set := range scaleSets(t.Cluster) {
		vms, err := t.instances(ctx, set)
		if err != nil {
			return "", nil, err
		}
		for _, vm := range vms {
			if *vm.Name == name || computerName(vm) != "" && strings.EqualFold(computerName(vm), name) {
				return set, vm, nil
			}
		}
	}
	return "", nil, fmt.Errorf("no scale-set instance named %s in %s", name, t.Cluster.ResourceGroup())
}

func computerName(vm *armcompute.VirtualMachineScaleSetVM) string {
	if vm.Properties == nil || vm.Properties.OSProfile == nil || vm.Properties.OSProfile.ComputerName == nil {
		return ""
	}
	return *vm.Properties.OSProfile.ComputerName
}

// member returns the etcd member of that name.
func (t *Target) member(name string) (string, spec.Member, bool) {
	for _, e := range t.Cluster.EtcdClusters() {
		for _, m := range e.Members {
			if m.Name == name {
				return e.Role, m, true
			}
		}
	}
	return "", spec.Member{}, false
}

// address is host:port of a control-plane machine: a member's static IP, or the NIC of an
// apiserver instance.
func (t *Target) address(ctx context.Context, name string) (string, error) {
	if _, m, ok := t.member(name); ok {
		return net.JoinHostPort(m.IP, fmt.Sprint(wellknown.EtcdClientPort)), nil
	}
	set, vm, err := t.instance(ctx, name)
	if err != nil {
		return "", err
	}
	pager := t.Azure.NICs.NewListVirtualMachineScaleSetVMNetworkInterfacesPager(t.Cluster.ResourceGroup(), set, *vm.InstanceID, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return "", err
		}
		for _, nic := range page.Value {
			for _, ip := range nic.Properties.IPConfigurations {
				if ip.Properties != nil && ip.Properties.PrivateIPAddress != nil && (ip.Properties.Primary == nil || *ip.Properties.Primary) {
					return net.JoinHostPort(*ip.Properties.PrivateIPAddress, fmt.Sprint(wellknown.APIServerPort)), nil
				}
			}
		}
	}
	return "", fmt.Errorf("%s has no private address", name)
}

// EtcdClient reaches the members at their static addresses with the etcdClient pair.
func (t *Target) EtcdClient(role string, members ...string) (*clientv3.Client, error) {
	var endpoints []string
	for _, e := range t.Cluster.EtcdClusters() {
		for _, m := range e.Members {
			if e.Role == role && (len(members) == 0 || slices.Contains(members, m.Name)) {
				endpoints = append(endpoints, fmt.Sprintf("https://%s:%d", m.IP, wellknown.EtcdClientPort))
			}
		}
	}
	cfg := clientv3.Config{Endpoints: endpoints, TLS: t.Access.Etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if dial := t.Access.Dial; dial != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})}
	}
	return clientv3.New(cfg)
}

// Clientset is the admin's client through the load balancer.
func (t *Target) Clientset() (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(t.Access.REST)
}

func (t *Target) get(ctx context.Context, name, path string) (int, []byte, error) {
	addr, err := t.address(ctx, name)
	if err != nil {
		return 0, nil, err
	}
	transport := &http.Transport{TLSClientConfig: t.Access.APIServer, DialContext: t.Access.Dial}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, body, err
}

// APIServerVersion reads the instance's /version.
func (t *Target) APIServerVersion(ctx context.Context, name string) (string, error) {
	code, body, err := t.get(ctx, name, "/version")
	if err != nil {
		return "", err
	}
	return roll.GitVersion(name, code, body)
}

// InRotation asks the instance what the load balancer's probe asks it.
func (t *Target) InRotation(ctx context.Context, name string) (bool, error) {
	code, _, err := t.get(ctx, name, spec.APIServerProbePath)
	if err != nil {
		return false, nil // refused or unreachable: the probe fails too
	}
	return code == http.StatusOK, nil
}

// ServingCertificate reads the certificate the machine serves.
func (t *Target) ServingCertificate(ctx context.Context, name string) (*x509.Certificate, error) {
	addr, err := t.address(ctx, name)
	if err != nil {
		return nil, err
	}
	return certexpiry.PeerCertificate(ctx, t.Access.Dial, addr)
}

// LeaseMachine maps a lease's holder, "<computer name>_<id>", to its instance.
func (t *Target) LeaseMachine(ctx context.Context, lease string) (string, error) {
	cs, err := t.Clientset()
	if err != nil {
		return "", err
	}
	host, err := roll.LeaseHolderHost(ctx, cs, lease)
	if err != nil {
		return "", err
	}
	_, vm, err := t.instance(ctx, host)
	if err != nil {
		return "", err
	}
	return *vm.Name, nil
}

// TakeOutOfRotation stops kube-apiserver on the instance (Run Command): it fails its probe at
// once and serves through its shutdown delay while the load balancer takes it out. The
// apiservers' automatic repairs are suspended first, unless someone else already has: Azure
// documents a reimage as restarting their grace period, not a command, so they could reimage the
// stopped instance under the roll. Replace resumes them.
func (t *Target) TakeOutOfRotation(ctx context.Context, name string) error {
	set, vm, err := t.instance(ctx, name)
	if err != nil {
		return err
	}
	if err := t.holdRepairs(ctx); err != nil {
		return err
	}
	poller, err := t.Azure.ScaleSetVMs.BeginRunCommand(ctx, t.Cluster.ResourceGroup(), set, *vm.InstanceID, shellCommand("systemctl stop kube-apiserver"), nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, nil)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("stop kube-apiserver on %s: %w", name, err), t.releaseRepairs(ctx))
	}
	return nil
}

// holdRepairs suspends the apiserver scale set's automatic repairs if they are running.
func (t *Target) holdRepairs(ctx context.Context) error {
	view, err := t.Azure.ScaleSets.GetInstanceView(ctx, t.Cluster.ResourceGroup(), apiserverScaleSet(t.Cluster), nil)
	if err != nil {
		return fmt.Errorf("read the apiservers' automatic repairs: %w", err)
	}
	for _, svc := range view.OrchestrationServices {
		if svc.ServiceName != nil && *svc.ServiceName == armcompute.OrchestrationServiceNamesAutomaticRepairs &&
			svc.ServiceState != nil && *svc.ServiceState == armcompute.OrchestrationServiceStateRunning {
			if err := t.setRepairs(ctx, armcompute.OrchestrationServiceStateActionSuspend); err != nil {
				return err
			}
			t.heldRepairs = true
		}
	}
	return nil
}

// releaseRepairs resumes the repairs holdRepairs suspended.
func (t *Target) releaseRepairs(ctx context.Context) error {
	if !t.heldRepairs {
		return nil
	}
	if err := t.setRepairs(ctx, armcompute.OrchestrationServiceStateActionResume); err != nil {
		return err
	}
	t.heldRepairs = false
	return nil
}

func (t *Target) setRepairs(ctx context.Context, action armcompute.OrchestrationServiceStateAction) error {
	poller, err := t.Azure.ScaleSets.BeginSetOrchestrationServiceState(ctx, t.Cluster.ResourceGroup(), apiserverScaleSet(t.Cluster),
		armcompute.OrchestrationServiceStateInput{ServiceName: to.Ptr(armcompute.OrchestrationServiceNamesAutomaticRepairs), Action: to.Ptr(action)}, nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("%s the apiservers' automatic repairs: %w", action, err)
	}
	return nil
}

// StopEtcd stops etcd on the member's VM (Run Command).
func (t *Target) StopEtcd(ctx context.Context, name string) error {
	poller, err := t.Azure.VMs.BeginRunCommand(ctx, t.Cluster.ResourceGroup(), name, shellCommand("systemctl stop etcd"), nil)
	if err != nil {
		return err
	}
	_, err = poller.PollUntilDone(ctx, nil)
	return err
}

// Replace replaces an etcd member's VM through Pulumi, or reimages a scale-set instance on its
// scale set's latest model.
func (t *Target) Replace(ctx context.Context, name string) error {
	if role, m, ok := t.member(name); ok {
		return t.replaceMemberVM(ctx, role, m)
	}
	set, vm, err := t.instance(ctx, name)
	if err != nil {
		return err
	}
	rg, id := t.Cluster.ResourceGroup(), *vm.InstanceID
	update, err := t.Azure.ScaleSets.BeginUpdateInstances(ctx, rg, set, armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: []*string{to.Ptr(id)}}, nil)
	if err != nil {
		return fmt.Errorf("update %s to the latest model: %w", name, err)
	}
	if _, err := update.PollUntilDone(ctx, nil); err != nil {
		return fmt.Errorf("update %s to the latest model: %w", name, err)
	}
	// cloud-init runs the new user-data only on a fresh OS disk.
	reimage, err := t.Azure.ScaleSetVMs.BeginReimage(ctx, rg, set, id, nil)
	if err != nil {
		return fmt.Errorf("reimage %s: %w", name, err)
	}
	if _, err := reimage.PollUntilDone(ctx, nil); err != nil {
		return err
	}
	// The reimage restarted the repairs' grace period: it covers the apiserver's start.
	return t.releaseRepairs(ctx)
}

var _ roll.WorkerReplacer = (*Target)(nil)

// ReplaceWorkers moves a batch of workers onto their scale sets' latest model: each node's
// instance found in one listing of each scale set, then, for every scale set of the batch at
// once, one UpdateInstances and one Reimage naming all its instances. Per machine, a batch of
// 50 would be 100 operations polled one after another; here it is two per scale set.
func (t *Target) ReplaceWorkers(ctx context.Context, names []string) error {
	rg := t.Cluster.ResourceGroup()
	ids := map[string][]*string{}
	left := slices.Clone(names)
	for _, pool := range t.Cluster.ScaleSets() {
		if len(left) == 0 {
			break
		}
		set := pool.AzureName
		vms, err := t.instances(ctx, set)
		if err != nil {
			return err
		}
		for _, vm := range vms {
			if i := slices.IndexFunc(left, func(n string) bool { return strings.EqualFold(n, computerName(vm)) }); i >= 0 {
				ids[set] = append(ids[set], vm.InstanceID)
				left = slices.Delete(left, i, i+1)
			}
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("no worker scale-set instance named %v in %s", left, rg)
	}
	err := eachScaleSet(ids, func(set string, in []*string) (func() error, error) {
		p, err := t.Azure.ScaleSets.BeginUpdateInstances(ctx, rg, set, armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: in}, nil)
		if err != nil {
			return nil, err
		}
		return func() error { _, err := p.PollUntilDone(ctx, nil); return err }, nil
	})
	if err != nil {
		return fmt.Errorf("update to the latest model: %w", err)
	}
	// cloud-init runs the new user-data only on a fresh OS disk.
	err = eachScaleSet(ids, func(set string, in []*string) (func() error, error) {
		p, err := t.Azure.ScaleSets.BeginReimage(ctx, rg, set, &armcompute.VirtualMachineScaleSetsClientBeginReimageOptions{
			VMScaleSetReimageInput: &armcompute.VirtualMachineScaleSetReimageParameters{InstanceIDs: in}})
		if err != nil {
			return nil, err
		}
		return func() error { _, err := p.PollUntilDone(ctx, nil); return err }, nil
	})
	if err != nil {
		return fmt.Errorf("reimage: %w", err)
	}
	return nil
}

// eachScaleSet starts an operation on every scale set, then waits for every one started, even
// when a later one could not start.
func eachScaleSet(ids map[string][]*string, start func(set string, ids []*string) (wait func() error, err error)) error {
	var g errgroup.Group
	var failed error
	for _, set := range slices.Sorted(maps.Keys(ids)) {
		wait, err := start(set, ids[set])
		if err != nil {
			failed = fmt.Errorf("%s: %w", set, err)
			break
		}
		g.Go(wait)
	}
	return errors.Join(failed, g.Wait())
}

// replaceMemberVM runs the Pulumi update that replaces one member's VM: the program lifts that
// VM's protection for this run only (rollStep member:<name>, for 30 minutes), and the update
// targets it alone.
func (t *Target) replaceMemberVM(ctx context.Context, role string, m spec.Member) error {
	if err := t.Stack.SetConfig(ctx, program.RollStepKey, auto.ConfigValue{Value: program.RollStep(program.RollMember+m.Name, time.Now())}); err != nil {
		return err
	}
	urn := azure.EtcdMemberVMURN(t.StackName, t.Project, t.Cluster, role, m)
	if _, err := t.Stack.Up(ctx, optup.Target([]string{urn}), optup.Replace([]string{urn}), optup.Parallel(1), t.progress()); err != nil {
		return fmt.Errorf("replace %s's VM: %w", m.Name, err)
	}
	return t.Stack.SetConfig(ctx, program.RollStepKey, auto.ConfigValue{Value: program.RollStep(program.RollModels, time.Now())})
}

func (t *Target) progress() optup.Option {
	if t.Progress == nil {
		return optup.ProgressStreams()
	}
	return optup.ProgressStreams(t.Progress)
}

// shellCommand is a Run Command script.
func shellCommand(script string) armcompute.RunCommandInput {
	return armcompute.RunCommandInput{CommandID: to.Ptr("RunShellScript"), Script: []*string{to.Ptr(script)}}
}

// doneMarker ends the output of a Run Command script that succeeded: Run Command reports no exit status.
const doneMarker = "CLUSTERFORGE-DONE"

// onMember runs a clusterforge-etcd-backup verb on the first main member where it succeeds.
func (t *Target) onMember(ctx context.Context, verb string) error {
	var errs []error
	for _, e := range t.Cluster.EtcdClusters() {
		if e.Role != spec.RoleEtcdMain {
			continue
		}
		for _, m := range e.Members {
			script := fmt.Sprintf("%s %s --config=%s && echo %s", machine.EtcdBackupBinary, verb, machine.EtcdBackupConfig, doneMarker)
			if verb == "snapshot" {
				script = fmt.Sprintf("%s %s --config=%s --endpoint=https://%s:%d && echo %s", machine.EtcdBackupBinary, verb, machine.EtcdBackupConfig, m.IP, wellknown.EtcdClientPort, doneMarker)
			}
			poller, err := t.Azure.VMs.BeginRunCommand(ctx, t.Cluster.ResourceGroup(), m.Name, shellCommand(script), nil)
			if err == nil {
				var resp armcompute.VirtualMachinesClientRunCommandResponse
				if resp, err = poller.PollUntilDone(ctx, nil); err == nil {
					out := runOutput(resp.RunCommandResult)
					if strings.Contains(out, doneMarker) {
						return nil
					}
					err = errors.New(strings.TrimSpace(out))
				}
			}
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
		}
	}
	return fmt.Errorf("clusterforge-etcd-backup %s: %w", verb, errors.Join(errs...))
}

func runOutput(r armcompute.RunCommandResult) string {
	var b strings.Builder
	for _, s := range r.Value {
		if s != nil && s.Message != nil {
			b.WriteString(*s.Message)
		}
	}
	return b.String()
}

// FreshBackup runs the backup gate on a main member, with its managed identity: the store is
// reachable only from the cluster's network.
func (t *Target) FreshBackup(ctx context.Context) error { return t.onMember(ctx, "gate") }

// BackupNow takes and verifies a snapshot on a main member.
func (t *Target) BackupNow(ctx context.Context) error { return t.onMember(ctx, "snapshot") }

// Prepare runs `pulumi up` with rollStep models: the apiservers' scale-set model and everything
// else in place; no etcd VM is replaced (their immutable properties are ignored outside a member's
// step), and the worker pools keep their models until the canary. Then the cluster services'
// `pulumi up` applies the desired add-ons.
func (t *Target) Prepare(ctx context.Context) error {
	if err := t.upWith(ctx, program.RollModels); err != nil {
		return err
	}
	if _, err := t.Services.Up(ctx, t.progress()); err != nil {
		return fmt.Errorf("the cluster services' up: %w", err)
	}
	return nil
}

// MoveWorkerModels runs `pulumi up` with the named pools' scale-set models moved to the desired
// spec and every other pool's kept as applied.
func (t *Target) MoveWorkerModels(ctx context.Context, pools []string) error {
	return t.upWith(ctx, program.ModelsStep(pools))
}

// StaleWorkers are the worker instances not on their scale set's latest model.
func (t *Target) StaleWorkers(ctx context.Context) ([]string, error) {
	var out []string
	for _, set := range t.Cluster.ScaleSets() {
		vms, err := t.instances(ctx, set.AzureName)
		if err != nil {
			return nil, err
		}
		for _, vm := range vms {
			if p := vm.Properties; p == nil || p.LatestModelApplied == nil || !*p.LatestModelApplied {
				out = append(out, cmp.Or(computerName(vm), *vm.Name))
			}
		}
	}
	return out, nil
}

// Commit runs `pulumi up` with rollStep done, which records the desired spec as applied.
func (t *Target) Commit(ctx context.Context) error {
	if err := t.upWith(ctx, program.RollDone); err != nil {
		return err
	}
	return t.Stack.RemoveConfig(ctx, program.RollStepKey)
}

func (t *Target) upWith(ctx context.Context, step string) error {
	if err := t.Stack.SetConfig(ctx, program.RollStepKey, auto.ConfigValue{Value: program.RollStep(step, time.Now())}); err != nil {
		return err
	}
	_, err := t.Stack.Up(ctx, t.progress())
	return err
}

// Models reports, per machine, whether it runs its latest model: for a scale-set instance
// Azure's own drift signal under upgradePolicy Manual (latestModelApplied), for an etcd member's
// VM whether it boots the control-plane image the spec names (its image changes only by a roll).
func (t *Target) Models(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	for _, e := range t.Cluster.EtcdClusters() {
		for _, m := range e.Members {
			vm, err := t.Azure.VMs.Get(ctx, t.Cluster.ResourceGroup(), m.Name, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.Name, err)
			}
			p := vm.Properties
			out[m.Name] = p != nil && p.StorageProfile != nil && p.StorageProfile.ImageReference != nil &&
				p.StorageProfile.ImageReference.ID != nil && strings.EqualFold(*p.StorageProfile.ImageReference.ID, t.Cluster.ControlPlaneImage)
		}
	}
	for _, set := range scaleSets(t.Cluster) {
		vms, err := t.instances(ctx, set)
		if err != nil {
			return nil, err
		}
		for _, vm := range vms {
			latest := vm.Properties != nil && vm.Properties.LatestModelApplied != nil && *vm.Properties.LatestModelApplied
			out[*vm.Name] = latest
			if name := computerName(vm); name != "" {
				out[strings.ToLower(name)] = latest
			}
		}
	}
	return out, nil
}
