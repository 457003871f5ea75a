package arm

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/azurerbac"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

const (
	subscription = "00000000-0000-0000-0000-000000000000"
	tenant       = "22222222-2222-2222-2222-222222222222"
	group        = "rg-test"
	operator     = "11111111-1111-1111-1111-00000000000a" // Virtual Machine Contributor over the resource group
	remover      = "11111111-1111-1111-1111-00000000000b" // clusterforge-ops's custom role over one scale set
	reader       = "11111111-1111-1111-1111-00000000000d" // clusterforge-csr-approver's custom role over one scale set
	stranger     = "11111111-1111-1111-1111-00000000000c" // no assignment
)

// speedup runs the model's minutes in a tenth of a second: latencies, windows and Retry-After
// shrink alike.
const speedup = 600

// fleet records what the machines behind the instances were asked to do.
type fleet struct {
	mu   sync.Mutex
	done []string
}

func (f *fleet) note(op string, in Instance) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = append(f.done, op+" "+in.ComputerName)
	return nil
}
func (f *fleet) Create(_ context.Context, in Instance) (string, error) {
	return "10.9.0." + in.ID, f.note("create", in)
}
func (f *fleet) Delete(_ context.Context, in Instance) error  { return f.note("delete", in) }
func (f *fleet) Reimage(_ context.Context, in Instance) error { return f.note("reimage "+in.Image, in) }
func (f *fleet) RunCommand(_ context.Context, id string, script []string) (string, string, error) {
	return "ran " + strings.Join(script, ";") + " on " + id[strings.LastIndex(id, "/")+1:], "", nil
}

type world struct {
	*Local
	srv   *Server
	fleet *fleet
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{fleet: &fleet{}}
	w.srv = &Server{Subscription: subscription, ResourceGroup: group, Location: "eastus2", Speedup: speedup, PageSize: 2, Machines: w.fleet}
	w.Local = Serve(t, w.srv, tenant)
	w.Grant(operator, w.GroupID(), azurerbac.BuiltInRoleActions[azurerbac.RoleVirtualMachineContributor]...)
	w.Grant(remover, w.GroupID()+"/providers/Microsoft.Compute/virtualMachineScaleSets/cpu", azurerbac.CustomRoleActions[azurerbac.RoleScaleSetInstanceRemover]...)
	w.Grant(remover, w.GroupID(), azurerbac.CustomRoleActions[azurerbac.RoleOperationReader]...)
	w.Grant(reader, w.GroupID()+"/providers/Microsoft.Compute/virtualMachineScaleSets/cpu", azurerbac.CustomRoleActions[azurerbac.RoleScaleSetInstanceReader]...)
	var five []*Instance
	for i := range 5 {
		five = append(five, &Instance{PrivateIP: fmt.Sprintf("10.1.0.%d", 4+i)})
	}
	w.srv.AddScaleSet(ScaleSet{Name: "cpu", SKU: "Standard_D8s_v5", Zones: []string{"1", "2", "3"}, ComputerNamePrefix: "cpu", Image: "image-1", Instances: five})
	w.srv.AddScaleSet(ScaleSet{Name: "gpu", SKU: "Standard_ND96asr_v4", ComputerNamePrefix: "gpu", Image: "image-1"})
	return w
}

func (w *world) compute(t *testing.T, client string) *armcompute.ClientFactory {
	t.Helper()
	f, err := armcompute.NewClientFactory(subscription, w.Credential(client), w.Options())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func names(t *testing.T, vms *armcompute.VirtualMachineScaleSetVMsClient, set string) []string {
	t.Helper()
	var out []string
	pager := vms.NewListPager(group, set, nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, vm := range page.Value {
			out = append(out, *vm.Properties.OSProfile.ComputerName)
		}
	}
	return out
}

// The Azure SDK's own clients list, resize, upgrade, reimage, run commands on and delete
// instances through the stand-in, every change a long-running operation they poll.
func TestComputeThroughTheSDK(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	f := w.compute(t, operator)
	vms, sets := f.NewVirtualMachineScaleSetVMsClient(), f.NewVirtualMachineScaleSetsClient()

	if got := strings.Join(names(t, vms, "cpu"), " "); got != "cpu000000 cpu000001 cpu000002 cpu000003 cpu000004" {
		t.Fatalf("listed %s (pages of two), want Azure's computer names of instances 0-4", got)
	}
	grow, err := sets.BeginUpdate(ctx, group, "gpu", armcompute.VirtualMachineScaleSetUpdate{SKU: &armcompute.SKU{Capacity: to.Ptr(int64(37))}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grow.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	gpu := names(t, vms, "gpu")
	if len(gpu) != 37 || gpu[36] != "gpu000010" {
		t.Errorf("grown to %d instances, the last %q: want 37, the 37th named in base 36 (gpu000010)", len(gpu), gpu[len(gpu)-1])
	}
	// A grown instance's NIC holds the address its machine was given.
	nics, err := armnetwork.NewInterfacesClient(subscription, w.Credential(operator), w.Options())
	if err != nil {
		t.Fatal(err)
	}
	page, err := nics.NewListVirtualMachineScaleSetVMNetworkInterfacesPager(group, "gpu", "36", nil).NextPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := *page.Value[0].Properties.IPConfigurations[0].Properties.PrivateIPAddress; got != "10.9.0.36" {
		t.Errorf("instance 36's NIC holds %q, want the address its machine was given, 10.9.0.36", got)
	}
	// A batch larger than a bucket holds (DeleteVMScaleSet: 12 a scale set) waits for a full
	// bucket, not for ever.
	var twenty []*string
	for i := range 20 {
		twenty = append(twenty, to.Ptr(strconv.Itoa(i)))
	}
	shrink, err := sets.BeginDeleteInstances(ctx, group, "gpu", armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: twenty}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shrink.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if gpu := names(t, vms, "gpu"); len(gpu) != 17 {
		t.Errorf("%d instances after deleting 20 of 37", len(gpu))
	}

	if _, err := sets.BeginUpdate(ctx, group, "cpu", armcompute.VirtualMachineScaleSetUpdate{Properties: &armcompute.VirtualMachineScaleSetUpdateProperties{
		VirtualMachineProfile: &armcompute.VirtualMachineScaleSetUpdateVMProfile{StorageProfile: &armcompute.VirtualMachineScaleSetUpdateStorageProfile{
			ImageReference: &armcompute.ImageReference{ID: to.Ptr("image-2")}}}}}, nil); err != nil {
		t.Fatal(err)
	}
	upgrade, err := sets.BeginUpdateInstances(ctx, group, "cpu", armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: []*string{to.Ptr("1"), to.Ptr("2")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := upgrade.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	reimage, err := vms.BeginReimage(ctx, group, "cpu", "1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reimage.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for id, latest := range map[string]bool{"1": true, "2": true, "3": false} {
		vm, err := vms.Get(ctx, group, "cpu", id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if *vm.Properties.LatestModelApplied != latest {
			t.Errorf("instance %s: latest model applied %v, want %v", id, *vm.Properties.LatestModelApplied, latest)
		}
	}

	run, err := vms.BeginRunCommand(ctx, group, "cpu", "3", armcompute.RunCommandInput{CommandID: to.Ptr("RunShellScript"), Script: []*string{to.Ptr("true")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.PollUntilDone(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Value) == 0 || *out.Value[0].Message != "ran true on 3" {
		t.Errorf("run command returned %+v, want the machine's output", out.Value)
	}

	del, err := sets.BeginDeleteInstances(ctx, group, "cpu", armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: []*string{to.Ptr("0"), to.Ptr("4")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := del.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(t, vms, "cpu"), " "); got != "cpu000001 cpu000002 cpu000003" {
		t.Errorf("after deleting 0 and 4: %s", got)
	}
	w.fleet.mu.Lock()
	done := strings.Join(w.fleet.done, "\n")
	w.fleet.mu.Unlock()
	for _, want := range []string{"create gpu000010", "reimage image-2 cpu000001", "delete cpu000000", "delete cpu000004"} {
		if !strings.Contains(done, want) {
			t.Errorf("the machines were not told %q; they were told:\n%s", want, done)
		}
	}
}

// Remediation's own code removes a node's instance with clusterforge-ops's custom role, and the
// role opens nothing else; callers without a valid token for Resource Manager are refused.
// A scale set's write with If-Match goes through only over the model of that ETag, as
// cluster-autoscaler's enableVMSSEtag sends it: a resize read before another writer's is refused
// with 412, and the ETag changes with every accepted write.
func TestScaleSetWritesHonourIfMatch(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	sets := w.compute(t, operator).NewVirtualMachineScaleSetsClient()
	read, err := sets.Get(ctx, group, "gpu", nil)
	if err != nil || read.Etag == nil {
		t.Fatalf("the scale set: %v, ETag %v", err, read.Etag)
	}
	resize := func(capacity int64, etag *string) error {
		poller, err := sets.BeginCreateOrUpdate(ctx, group, "gpu", armcompute.VirtualMachineScaleSet{Location: to.Ptr("eastus2"),
			SKU: &armcompute.SKU{Capacity: to.Ptr(capacity)}}, &armcompute.VirtualMachineScaleSetsClientBeginCreateOrUpdateOptions{IfMatch: etag})
		if err != nil {
			return err
		}
		_, err = poller.PollUntilDone(ctx, nil)
		return err
	}
	if err := resize(3, read.Etag); err != nil {
		t.Fatalf("a resize over the model it read: %v", err)
	}
	var refused *azcore.ResponseError
	if err := resize(4, read.Etag); !errors.As(err, &refused) || refused.StatusCode != http.StatusPreconditionFailed || refused.ErrorCode != "PreconditionFailed" {
		t.Errorf("a resize over a model another write changed: %v, want 412 PreconditionFailed", err)
	}
	again, err := sets.Get(ctx, group, "gpu", nil)
	if err != nil || *again.Etag == *read.Etag || *again.SKU.Capacity != 3 {
		t.Errorf("after one write: ETag %v (read %v), capacity %v; want a new ETag and 3", again.Etag, *read.Etag, again.SKU.Capacity)
	}
}

func TestRemediationRoleAndAuthentication(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	ops := w.compute(t, remover)
	m := &scaleset.Machines{VMs: ops.NewVirtualMachineScaleSetVMsClient(), Subscription: subscription, ResourceGroup: group, ScaleSets: []string{"cpu"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu000002"},
		Spec: corev1.NodeSpec{ProviderID: "azure:///subscriptions/" + subscription + "/resourceGroups/" + group + "/providers/Microsoft.Compute/virtualMachineScaleSets/cpu/virtualMachines/2"}}
	if err := m.Remove(ctx, node); err != nil {
		t.Fatalf("remediation could not remove its node's instance with its role: %v", err)
	}
	if got := strings.Join(names(t, w.compute(t, operator).NewVirtualMachineScaleSetVMsClient(), "cpu"), " "); strings.Contains(got, "cpu000002") {
		t.Errorf("cpu000002 is still listed: %s", got)
	}

	refused := func(name string, err error, code string) {
		t.Helper()
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.ErrorCode != code {
			t.Errorf("%s: got %v, want %s", name, err, code)
		}
	}
	_, err := ops.NewVirtualMachineScaleSetsClient().BeginUpdate(ctx, group, "cpu", armcompute.VirtualMachineScaleSetUpdate{SKU: &armcompute.SKU{Capacity: to.Ptr(int64(50))}}, nil)
	refused("the remover resizing", err, "AuthorizationFailed")
	_, err = ops.NewVirtualMachineScaleSetVMsClient().BeginRunCommand(ctx, group, "cpu", "1", armcompute.RunCommandInput{CommandID: to.Ptr("RunShellScript"), Script: []*string{to.Ptr("id")}}, nil)
	refused("the remover running a command", err, "AuthorizationFailed")
	_, err = ops.NewVirtualMachineScaleSetVMsClient().BeginDelete(ctx, group, "gpu", "0", nil)
	refused("the remover deleting in another scale set", err, "AuthorizationFailed")
	_, err = w.compute(t, stranger).NewVirtualMachineScaleSetVMsClient().Get(ctx, group, "cpu", "1", nil)
	refused("a client without assignments", err, "AuthorizationFailed")

	for name, tc := range map[string]struct {
		header, code string
	}{
		"no token":           {"", "AuthenticationFailed"},
		"a Graph token":      {"Bearer " + must(w.Entra.AccessToken(operator, "https://graph.microsoft.com")), "InvalidAuthenticationTokenAudience"},
		"another tenant's":   {"Bearer " + must((&entra.Server{Tenant: "33333333-3333-3333-3333-333333333333", SigningKey: w.Entra.SigningKey, Now: time.Now}).AccessToken(operator, azurecloud.Public.TokenAudience)), "InvalidAuthenticationTokenTenant"},
		"a forged signature": {"Bearer " + forged(must(w.Entra.AccessToken(operator, azurecloud.Public.TokenAudience))), "InvalidAuthenticationToken"},
	} {
		req, _ := http.NewRequest(http.MethodGet, w.HTTP.URL+"/subscriptions/"+subscription+"/resourceGroups/"+group+"/providers/Microsoft.Compute/virtualMachineScaleSets?api-version=2024-11-01", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		resp, err := w.HTTP.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		re := errorCode(resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || re != tc.code {
			t.Errorf("%s: %d %s, want 401 %s", name, resp.StatusCode, re, tc.code)
		}
	}
}

// Compute's token buckets refuse a burst past their capacity with 429 and a Retry-After, and
// the SDK's retry policy, waiting as told, gets every call through. How many are refused depends
// on how fast this machine makes them (the bucket refills meanwhile); that the first full
// bucket's worth passes and that the rest meet refusals does not.
func TestThrottlingAsComputeDoes(t *testing.T) {
	w := newWorld(t)
	w.srv.Speedup = 60 // a token back every 83 ms: a burst outruns the refill on any machine
	ctx := context.Background()
	vms := w.compute(t, operator).NewVirtualMachineScaleSetVMsClient()
	capacity := int(PolicyGetVMScaleSetVMs.ResourceCapacity) // 36 a VM, refilled at 12 a minute
	const burst = 60
	for range burst {
		if _, err := vms.Get(ctx, group, "cpu", "1", nil); err != nil {
			t.Fatalf("a throttled call was not retried through: %v", err)
		}
	}
	answered, throttled := 0, 0
	for _, c := range w.srv.Calls() {
		switch {
		case c.Status == http.StatusTooManyRequests:
			throttled++
			if answered < capacity {
				t.Errorf("throttled after %d calls, within the bucket's %d", answered, capacity)
			}
			if c.Throttled != PolicyGetVMScaleSetVMs.Name {
				t.Errorf("throttled by %s, want %s", c.Throttled, PolicyGetVMScaleSetVMs.Name)
			}
		case c.Status == http.StatusOK:
			answered++
		}
	}
	if answered != burst || throttled == 0 {
		t.Errorf("%d calls answered, %d throttled: want all %d answered and the burst past %d throttled", answered, throttled, burst, capacity)
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// forged keeps a token's header and claims and signs them with another key.
func forged(token string) string {
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	parts := strings.Split(token, ".")
	resigned := must(standin.SignRS256(other, map[string]any{}))
	return parts[0] + "." + parts[1] + "." + strings.Split(resigned, ".")[2]
}

// errorCode is a Resource Manager error body's code.
func errorCode(resp *http.Response) string {
	var body struct {
		Error struct{ Code string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return body.Error.Code
}

// A batch request is one request to Resource Manager's write bucket, and a token per VM, at most
// a full bucket, to Compute's.
func TestBatchesCostResourceManagerOneRequest(t *testing.T) {
	var th throttle
	now, minute := time.Now(), time.Minute
	cs := charges("/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/cpu", PolicySubscriptionWrites, PolicyUpdateVMScaleSetVMs)
	if wait, refused := th.take(cs, 300, now, minute); refused != nil {
		t.Fatalf("a batch of 300 refused by %s for %s", refused.Name, wait)
	}
	h := th.headers(cs, now, minute)
	if got := h[PolicySubscriptionWrites.Header]; got != "199" {
		t.Errorf("Resource Manager's writes left %s after one batch request, want 199", got)
	}
	if got := h["x-ms-ratelimit-remaining-resource"]; !strings.Contains(got, "UpdateVMScaleSetVMsSubscription;1200") || !strings.Contains(got, "UpdateVMScaleSetVMsResource;0") {
		t.Errorf("Compute's buckets after a batch of 300: %s, want 1200 left for the subscription and the scale set's emptied", got)
	}
}

// The Network client lists an instance's interface as clusterforge-csr-approver reads it, with
// the approver's role: the primary IP configuration holds the instance's address.
func TestInstanceAddressesThroughTheSDK(t *testing.T) {
	w := newWorld(t)
	vms, err := armcompute.NewVirtualMachineScaleSetVMsClient(subscription, w.Credential(reader), w.Options())
	if err != nil {
		t.Fatal(err)
	}
	nics, err := armnetwork.NewInterfacesClient(subscription, w.Credential(reader), w.Options())
	if err != nil {
		t.Fatal(err)
	}
	m := &scaleset.Machines{VMs: vms, NICs: nics, Subscription: subscription, ResourceGroup: group, ScaleSets: []string{"cpu"}}
	id := scaleset.ProviderIDPrefix + w.srv.ScaleSetID("cpu") + "/virtualMachines/2"
	addrs, err := m.Addresses(context.Background(), id, "cpu000002")
	if err != nil || len(addrs) != 1 || addrs[0].String() != "10.1.0.6" {
		t.Errorf("instance 2's addresses: %v, %v; want [10.1.0.6]", addrs, err)
	}
}

// cluster-autoscaler lists the resource group's VMs at start-up, even in scale-set mode, with the
// SDK's VM client: Azure authorizes the list at the group, so a grant on a scale set is not enough.
func TestResourceGroupVMsThroughTheSDK(t *testing.T) {
	w := newWorld(t)
	w.srv.AddVM(VM{Name: "etcd-main-0", ComputerName: "etcd-main-0", VMID: "vm-etcd-0"})
	const lister = "11111111-1111-1111-1111-00000000000e"
	w.Grant(lister, w.GroupID(), azurerbac.CustomRoleActions[azurerbac.RoleMachineLister]...)
	list := func(client string) ([]string, error) {
		var out []string
		pager := w.compute(t, client).NewVirtualMachinesClient().NewListPager(group, nil)
		for pager.More() {
			page, err := pager.NextPage(context.Background())
			if err != nil {
				return out, err
			}
			for _, vm := range page.Value {
				out = append(out, *vm.Name+"="+*vm.Properties.VMID)
			}
		}
		return out, nil
	}
	if got, err := list(lister); err != nil || !slices.Equal(got, []string{"etcd-main-0=vm-etcd-0"}) {
		t.Errorf("the group's VMs as the lister: %v, %v", got, err)
	}
	if _, err := list(remover); err == nil || !strings.Contains(err.Error(), "AuthorizationFailed") {
		t.Errorf("the group's VMs with a grant on a scale set only: %v, want AuthorizationFailed", err)
	}
}

// Resource Manager's cloud discovery answers anyone, as Azure does, with the list of clouds in the
// shape cloud-provider-azure's client reads (cluster-autoscaler reads it before signing in): this
// endpoint, its sign-in host and its token audience first.
func TestCloudMetadataForAnyone(t *testing.T) {
	w := newWorld(t)
	resp, err := w.Local.HTTP.Client().Get(w.Local.HTTP.URL + "/metadata/endpoints?api-version=2019-05-01")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var clouds []struct {
		Name            string `json:"name"`
		ResourceManager string `json:"resourceManager"`
		Authentication  struct {
			Audiences     []string `json:"audiences"`
			LoginEndpoint string   `json:"loginEndpoint"`
		} `json:"authentication"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&clouds); err != nil || resp.StatusCode != http.StatusOK || len(clouds) != 1 {
		t.Fatalf("cloud metadata: HTTP %d, %v, %+v", resp.StatusCode, err, clouds)
	}
	c := clouds[0]
	if c.ResourceManager != w.Local.HTTP.URL+"/" || c.Authentication.LoginEndpoint != w.Local.Server.Auth.AuthorityHost ||
		len(c.Authentication.Audiences) == 0 || c.Authentication.Audiences[0] != "https://management.core.windows.net/" {
		t.Errorf("cloud metadata %+v, want this endpoint, its sign-in host and Azure's token audience first", c)
	}
}
