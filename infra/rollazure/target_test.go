package rollazure

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	networkfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6/fake"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/azure"
	"github.com/clusterforge/clusterforge/infra/program"
)

// calls records what the fake ARM servers and the fake stack were asked, in order.
type calls struct {
	mu  sync.Mutex
	log []string
	// repairs is the apiserver scale set's automatic repairs service state (Running when "").
	repairs armcompute.OrchestrationServiceState
}

func (c *calls) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, s)
}

// fakeStack records the Automation API calls a roll makes.
type fakeStack struct {
	calls *calls
	// name prefixes its calls: "" for the infrastructure, "services " for the cluster services.
	name string
	ups  []optup.Options
}

// SetConfig records a roll step without its deadline, once the deadline is checked to lie ahead.
func (s *fakeStack) SetConfig(_ context.Context, key string, val auto.ConfigValue) error {
	value := val.Value
	if key == program.RollStepKey {
		step, until, _ := strings.Cut(value, "@")
		deadline, err := time.Parse(time.RFC3339, until)
		if err != nil || !deadline.After(time.Now()) || deadline.After(time.Now().Add(time.Hour)) {
			return fmt.Errorf("roll step %q: want a deadline within the hour", value)
		}
		value = step
	}
	s.calls.add("config " + key + "=" + value)
	return nil
}

func (s *fakeStack) RemoveConfig(_ context.Context, key string) error {
	s.calls.add("config -" + key)
	return nil
}

func (s *fakeStack) Up(_ context.Context, opts ...optup.Option) (auto.UpResult, error) {
	var o optup.Options
	for _, opt := range opts {
		opt.ApplyOption(&o)
	}
	s.ups = append(s.ups, o)
	s.calls.add(s.name + "up")
	return auto.UpResult{}, nil
}

// scaleSetVM is an instance the fake ARM servers list.
func scaleSetVM(name, id, computer string, latest bool) *armcompute.VirtualMachineScaleSetVM {
	return &armcompute.VirtualMachineScaleSetVM{Name: to.Ptr(name), InstanceID: to.Ptr(id), Properties: &armcompute.VirtualMachineScaleSetVMProperties{
		LatestModelApplied: to.Ptr(latest), OSProfile: &armcompute.OSProfile{ComputerName: to.Ptr(computer)},
	}}
}

// newTarget is a Target of the dev stack over fake ARM servers (the SDK's own, armcompute/fake
// and armnetwork/fake): the apiserver scale set has two instances, the cpu pool two, one of them
// not on the latest model; runOutput is what a VM's Run Command prints.
func newTarget(t *testing.T, runOutput string) (*Target, *calls, *fakeStack) {
	t.Helper()
	c, err := spec.LoadStack(filepath.Join("..", "..", spec.StackDir, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &calls{}
	sets := map[string][]*armcompute.VirtualMachineScaleSetVM{
		"cf-dev-apiserver": {scaleSetVM("cf-dev-apiserver_0", "0", "cf-dev-apiserver000000", true), scaleSetVM("cf-dev-apiserver_1", "1", "cf-dev-apiserver000001", true)},
		"cf-dev-cpu":       {scaleSetVM("cf-dev-cpu_0", "0", "cf-dev-cpu000000", true), scaleSetVM("cf-dev-cpu_3", "3", "cf-dev-cpu000003", false)},
	}
	compute := computefake.ServerFactory{
		VirtualMachineScaleSetVMsServer: computefake.VirtualMachineScaleSetVMsServer{
			NewListPager: func(rg, set string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
				resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{Value: sets[set]}}, nil)
				return resp
			},
			BeginReimage: func(_ context.Context, rg, set, id string, _ *armcompute.VirtualMachineScaleSetVMsClientBeginReimageOptions) (resp azfake.PollerResponder[armcompute.VirtualMachineScaleSetVMsClientReimageResponse], errResp azfake.ErrorResponder) {
				rec.add("reimage " + rg + "/" + set + "/" + id)
				resp.SetTerminalResponse(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientReimageResponse{}, nil)
				return resp, errResp
			},
			BeginRunCommand: func(_ context.Context, rg, set, id string, in armcompute.RunCommandInput, _ *armcompute.VirtualMachineScaleSetVMsClientBeginRunCommandOptions) (resp azfake.PollerResponder[armcompute.VirtualMachineScaleSetVMsClientRunCommandResponse], errResp azfake.ErrorResponder) {
				rec.add("run " + rg + "/" + set + "/" + id + ": " + *in.Script[0])
				resp.SetTerminalResponse(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientRunCommandResponse{}, nil)
				return resp, errResp
			},
		},
		VirtualMachineScaleSetsServer: computefake.VirtualMachineScaleSetsServer{
			GetInstanceView: func(_ context.Context, rg, set string, _ *armcompute.VirtualMachineScaleSetsClientGetInstanceViewOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetsClientGetInstanceViewResponse], errResp azfake.ErrorResponder) {
				rec.mu.Lock()
				state := cmp.Or(rec.repairs, armcompute.OrchestrationServiceStateRunning)
				rec.mu.Unlock()
				resp.SetResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientGetInstanceViewResponse{VirtualMachineScaleSetInstanceView: armcompute.VirtualMachineScaleSetInstanceView{
					OrchestrationServices: []*armcompute.OrchestrationServiceSummary{{ServiceName: to.Ptr(armcompute.OrchestrationServiceNamesAutomaticRepairs), ServiceState: to.Ptr(state)}}}}, nil)
				return resp, errResp
			},
			BeginSetOrchestrationServiceState: func(_ context.Context, rg, set string, in armcompute.OrchestrationServiceStateInput, _ *armcompute.VirtualMachineScaleSetsClientBeginSetOrchestrationServiceStateOptions) (resp azfake.PollerResponder[armcompute.VirtualMachineScaleSetsClientSetOrchestrationServiceStateResponse], errResp azfake.ErrorResponder) {
				rec.add("repairs " + string(*in.Action) + " " + rg + "/" + set)
				rec.mu.Lock()
				rec.repairs = map[armcompute.OrchestrationServiceStateAction]armcompute.OrchestrationServiceState{
					armcompute.OrchestrationServiceStateActionSuspend: armcompute.OrchestrationServiceStateSuspended,
					armcompute.OrchestrationServiceStateActionResume:  armcompute.OrchestrationServiceStateRunning}[*in.Action]
				rec.mu.Unlock()
				resp.SetTerminalResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientSetOrchestrationServiceStateResponse{}, nil)
				return resp, errResp
			},
			BeginUpdateInstances: func(_ context.Context, rg, set string, ids armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs, _ *armcompute.VirtualMachineScaleSetsClientBeginUpdateInstancesOptions) (resp azfake.PollerResponder[armcompute.VirtualMachineScaleSetsClientUpdateInstancesResponse], errResp azfake.ErrorResponder) {
				rec.add("update-instances " + rg + "/" + set + "/" + *ids.InstanceIDs[0])
				resp.SetTerminalResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientUpdateInstancesResponse{}, nil)
				return resp, errResp
			},
		},
		VirtualMachinesServer: computefake.VirtualMachinesServer{
			Get: func(_ context.Context, rg, vm string, _ *armcompute.VirtualMachinesClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachinesClientGetResponse], errResp azfake.ErrorResponder) {
				image := c.ControlPlaneImage
				if vm == "cf-dev-etcd-events-1" { // still on the image before
					image = strings.Replace(image, "0.0.0", "0.0.1", 1)
				}
				resp.SetResponse(http.StatusOK, armcompute.VirtualMachinesClientGetResponse{VirtualMachine: armcompute.VirtualMachine{Properties: &armcompute.VirtualMachineProperties{
					StorageProfile: &armcompute.StorageProfile{ImageReference: &armcompute.ImageReference{ID: to.Ptr(image)}}}}}, nil)
				return resp, errResp
			},
			BeginRunCommand: func(_ context.Context, rg, vm string, in armcompute.RunCommandInput, _ *armcompute.VirtualMachinesClientBeginRunCommandOptions) (resp azfake.PollerResponder[armcompute.VirtualMachinesClientRunCommandResponse], errResp azfake.ErrorResponder) {
				rec.add("run " + rg + "/" + vm + ": " + *in.Script[0])
				resp.SetTerminalResponse(http.StatusOK, armcompute.VirtualMachinesClientRunCommandResponse{RunCommandResult: armcompute.RunCommandResult{
					Value: []*armcompute.InstanceViewStatus{{Message: to.Ptr(runOutput)}}}}, nil)
				return resp, errResp
			},
		},
	}
	network := networkfake.ServerFactory{InterfacesServer: networkfake.InterfacesServer{
		NewListVirtualMachineScaleSetVMNetworkInterfacesPager: func(rg, set, id string, _ *armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesResponse]) {
			ip := &armnetwork.InterfaceIPConfiguration{Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Primary: to.Ptr(true), PrivateIPAddress: to.Ptr("10.0.0.1" + id)}}
			resp.AddPage(http.StatusOK, armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesResponse{InterfaceListResult: armnetwork.InterfaceListResult{
				Value: []*armnetwork.Interface{{Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{ip}}}}}}, nil)
			return resp
		},
	}}
	opts := func(tr policy.Transporter) *arm.ClientOptions {
		return &arm.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}}
	}
	cf, err := armcompute.NewClientFactory("00000000-0000-0000-0000-000000000000", &azfake.TokenCredential{}, opts(computefake.NewServerFactoryTransport(&compute)))
	if err != nil {
		t.Fatal(err)
	}
	nf, err := armnetwork.NewClientFactory("00000000-0000-0000-0000-000000000000", &azfake.TokenCredential{}, opts(networkfake.NewServerFactoryTransport(&network)))
	if err != nil {
		t.Fatal(err)
	}
	stack := &fakeStack{calls: rec}
	return &Target{Cluster: c, StackName: "dev", Project: "clusterforge", Stack: stack, Services: &fakeStack{calls: rec, name: "services "},
		Azure: Clients{ScaleSets: cf.NewVirtualMachineScaleSetsClient(), ScaleSetVMs: cf.NewVirtualMachineScaleSetVMsClient(),
			VMs: cf.NewVirtualMachinesClient(), NICs: nf.NewInterfacesClient()}}, rec, stack
}

// A worker, named as its node is (the computer name), is brought to the latest model, then
// reimaged so cloud-init runs its new user-data.
func TestReplaceWorkerUpdatesThenReimages(t *testing.T) {
	target, rec, _ := newTarget(t, "")
	if err := target.Replace(context.Background(), "cf-dev-cpu000003"); err != nil {
		t.Fatal(err)
	}
	want := []string{"update-instances cf-dev/cf-dev-cpu/3", "reimage cf-dev/cf-dev-cpu/3"}
	if !slices.Equal(rec.log, want) {
		t.Errorf("calls %q, want %q", rec.log, want)
	}
}

// Rolling an apiserver holds its scale set's automatic repairs off from taking it out of rotation
// until its reimage, which restarts their grace period; repairs someone else suspended stay so.
func TestAPIServerRollHoldsRepairsOff(t *testing.T) {
	for _, before := range []armcompute.OrchestrationServiceState{armcompute.OrchestrationServiceStateRunning, armcompute.OrchestrationServiceStateSuspended} {
		target, rec, _ := newTarget(t, "")
		rec.repairs = before
		ctx := context.Background()
		if err := target.TakeOutOfRotation(ctx, "cf-dev-apiserver000001"); err != nil {
			t.Fatal(err)
		}
		if err := target.Replace(ctx, "cf-dev-apiserver000001"); err != nil {
			t.Fatal(err)
		}
		want := []string{"run cf-dev/cf-dev-apiserver/1: systemctl stop kube-apiserver", "update-instances cf-dev/cf-dev-apiserver/1", "reimage cf-dev/cf-dev-apiserver/1"}
		if before == armcompute.OrchestrationServiceStateRunning {
			want = slices.Concat([]string{"repairs Suspend cf-dev/cf-dev-apiserver"}, want, []string{"repairs Resume cf-dev/cf-dev-apiserver"})
		}
		if !slices.Equal(rec.log, want) {
			t.Errorf("repairs %s before: calls %q, want %q", before, rec.log, want)
		}
		if rec.repairs != before {
			t.Errorf("repairs %s after the roll, want %s as before", rec.repairs, before)
		}
	}
}

// An etcd member's VM is replaced by one targeted update, parallelism 1, with the rollStep that
// lifts that VM's protection, and the step reset after.
func TestReplaceMemberIsOneTargetedUpdate(t *testing.T) {
	target, rec, stack := newTarget(t, "")
	if err := target.Replace(context.Background(), "cf-dev-etcd-main-2"); err != nil {
		t.Fatal(err)
	}
	urn := azure.EtcdMemberVMURN("dev", "clusterforge", target.Cluster, spec.RoleEtcdMain, target.Cluster.EtcdClusters()[0].Members[2])
	want := []string{"config " + program.RollStepKey + "=" + program.RollMember + "cf-dev-etcd-main-2", "up", "config " + program.RollStepKey + "=" + program.RollModels}
	if !slices.Equal(rec.log, want) {
		t.Fatalf("calls %q, want %q", rec.log, want)
	}
	up := stack.ups[0]
	if !slices.Equal(up.Target, []string{urn}) || !slices.Equal(up.Replace, []string{urn}) || up.Parallel != 1 {
		t.Errorf("the update targets %v, replaces %v with parallelism %d; want %s alone, parallelism 1", up.Target, up.Replace, up.Parallel, urn)
	}
}

// A canary's model moves by one whole update with the step naming its pool, which the program
// reads (infra/offline's TestRollHoldsWorkerModelsUntilTheCanary); nil puts every pool's back.
func TestWorkerModelsMoveByTheRollStep(t *testing.T) {
	target, rec, stack := newTarget(t, "")
	for _, pools := range [][]string{{"cpu"}, nil} {
		if err := target.MoveWorkerModels(context.Background(), pools); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"config " + program.RollStepKey + "=" + program.RollModels + "=cpu", "up", "config " + program.RollStepKey + "=" + program.RollModels, "up"}
	if !slices.Equal(rec.log, want) {
		t.Fatalf("calls %q, want %q", rec.log, want)
	}
	if up := stack.ups[0]; len(up.Target) != 0 || len(up.Replace) != 0 {
		t.Errorf("the update targets %v and replaces %v, want the whole stack and no replacement", up.Target, up.Replace)
	}
}

// Prepare moves the models (not the workers'), then applies the desired add-ons with the cluster
// services' stack, which reads the infrastructure's outputs.
func TestPrepareAppliesTheServicesAfterTheInfrastructure(t *testing.T) {
	target, rec, _ := newTarget(t, "")
	if err := target.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"config " + program.RollStepKey + "=" + program.RollModels, "up", "services up"}
	if !slices.Equal(rec.log, want) {
		t.Fatalf("calls %q, want %q", rec.log, want)
	}
}

// A member's etcd is stopped through Run Command on its VM before it is removed.
func TestStopEtcdRunsOnTheMember(t *testing.T) {
	target, rec, _ := newTarget(t, "")
	if err := target.StopEtcd(context.Background(), "cf-dev-etcd-main-3"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"run cf-dev/cf-dev-etcd-main-3: systemctl stop etcd"}; !slices.Equal(rec.log, want) {
		t.Errorf("calls %q, want %q", rec.log, want)
	}
}

// Taking an apiserver out of rotation stops its kube-apiserver through Run Command, the repairs
// held off first.
func TestTakeOutOfRotationStopsTheAPIServer(t *testing.T) {
	target, rec, _ := newTarget(t, "")
	if err := target.TakeOutOfRotation(context.Background(), "cf-dev-apiserver_1"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"repairs Suspend cf-dev/cf-dev-apiserver", "run cf-dev/cf-dev-apiserver/1: systemctl stop kube-apiserver"}; !slices.Equal(rec.log, want) {
		t.Errorf("calls %q, want %q", rec.log, want)
	}
	if addr, err := target.address(context.Background(), "cf-dev-apiserver_1"); err != nil || addr != "10.0.0.11:6443" {
		t.Errorf("apiserver address %q, %v: want the NIC's 10.0.0.11:6443", addr, err)
	}
}

// The backup gate runs on a member; output without the done marker is a refusal, with the
// member's words.
func TestBackupGateRunsOnAMember(t *testing.T) {
	target, rec, _ := newTarget(t, "safe to touch etcd\n"+doneMarker)
	if err := target.FreshBackup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.log) != 1 || !strings.HasPrefix(rec.log[0], "run cf-dev/cf-dev-etcd-main-0: /usr/local/bin/clusterforge-etcd-backup gate --config=/etc/kubernetes/etcd-backup.json") {
		t.Errorf("calls %q", rec.log)
	}
	refusing, _, _ := newTarget(t, "not safe to touch etcd: the newest verified snapshot is 9m old")
	err := refusing.FreshBackup(context.Background())
	if err == nil || !strings.Contains(err.Error(), "9m old") {
		t.Errorf("a refusing gate: %v", err)
	}
}

// Azure's latestModelApplied is the drift signal of scale-set instances, by VM name and by node
// name; an etcd VM is stale when it boots another image than the spec's.
func TestModelsReportStaleInstances(t *testing.T) {
	target, _, _ := newTarget(t, "")
	models, err := target.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, latest := range map[string]bool{"cf-dev-cpu000003": false, "cf-dev-cpu_3": false, "cf-dev-cpu000000": true,
		"cf-dev-apiserver_0": true, "cf-dev-etcd-main-0": true, "cf-dev-etcd-events-1": false} {
		if got, ok := models[name]; !ok || got != latest {
			t.Errorf("%s: latest model %v (reported: %v), want %v", name, got, ok, latest)
		}
	}
}

// The workers a roll must still replace are those off their scale set's model, by computer name.
func TestStaleWorkersAreThoseOffTheModel(t *testing.T) {
	target, _, _ := newTarget(t, "")
	stale, err := target.StaleWorkers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(stale, "cf-dev-cpu000003") || slices.Contains(stale, "cf-dev-cpu000000") || slices.ContainsFunc(stale, func(n string) bool { return strings.Contains(n, "apiserver") }) {
		t.Errorf("stale workers %v: want cf-dev-cpu000003, not cf-dev-cpu000000 nor an apiserver", stale)
	}
}
