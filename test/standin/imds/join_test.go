package imds_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/azurerbac"
	"github.com/clusterforge/clusterforge/components/csrapprover"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/standin/arm"
	"github.com/clusterforge/clusterforge/test/standin/imds"
)

const (
	subscription = "00000000-0000-0000-0000-00000000c0de"
	group        = "cf-dev"
	approver     = "11111111-1111-1111-1111-0000000000ap"
	autoscaler   = "11111111-1111-1111-1111-0000000000ca"
	operator     = "11111111-1111-1111-1111-0000000000op"
)

// workerImage is the image the worker scale sets' models boot; the approver takes its versions.
var workerImage = spec.PlaceholderImage(spec.GalleryImageWorkerCPU)

// A joining node's client certificate is approved only with its own instance's attested document,
// bound to the request's key, for the name Resource Manager gives that instance: the approver's
// own code against the metadata and Resource Manager stand-ins. A worker's root holds the join
// token and its own metadata service, so each refusal is something such a worker could try.
func TestJoinNeedsTheInstancesOwnAttestedDocument(t *testing.T) {
	dir := t.TempDir()
	if err := imds.WriteSigningChain(dir); err != nil {
		t.Fatal(err)
	}
	signer, err := imds.ReadSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Azure's minutes in tenths of a second: the model writes below wait for their operations.
	srv := &arm.Server{Subscription: subscription, ResourceGroup: group, Location: "eastus2", Speedup: 600}
	local := arm.Serve(t, srv, "22222222-2222-2222-2222-222222222222")
	local.Grant(approver, local.GroupID()+"/providers/Microsoft.Compute/virtualMachineScaleSets/cf-dev-cpu", azurerbac.CustomRoleActions[azurerbac.RoleScaleSetInstanceReader]...)
	srv.AddScaleSet(arm.ScaleSet{Name: "cf-dev-cpu", ComputerNamePrefix: "cf-dev-cpu", Image: workerImage, Zones: []string{"2"}, Instances: []*arm.Instance{{}, {}},
		Tags: machine.NodeTemplateTags(spec.ScaleSet{Name: "cpu", Pool: spec.Pool{Name: "cpu"}})})
	srv.AddScaleSet(arm.ScaleSet{Name: "cf-dev-apiserver", ComputerNamePrefix: "cf-dev-apiserver", Instances: []*arm.Instance{{}}})
	vms, err := armcompute.NewVirtualMachineScaleSetVMsClient(subscription, local.Credential(approver), local.Options())
	if err != nil {
		t.Fatal(err)
	}
	page, err := vms.NewListPager(group, "cf-dev-cpu", nil).NextPage(context.Background())
	if err != nil || len(page.Value) != 2 {
		t.Fatalf("workers: %v", err)
	}
	workers := page.Value
	// The metadata service answers each machine about itself, by address.
	meta := &imds.Server{Signer: signer, Machines: map[string]imds.InstanceMetadata{}}
	for i, vm := range workers {
		meta.Machines["10.0.2."+string(rune('4'+i))] = imds.InstanceMetadata{Name: *vm.Properties.OSProfile.ComputerName, ResourceID: *vm.ID, VMID: *vm.Properties.VMID}
	}
	roots := x509.NewCertPool()
	root, err := os.ReadFile(filepath.Join(dir, imds.RootFile))
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(root)
	instances := &csrapprover.WorkerInstances{Cred: local.Credential(approver), ControlPlane: "cf-dev-apiserver", Images: []string{spec.ImageDefinition(workerImage)},
		Access: &scaleset.Access{Cloud: local.Cloud(), Transport: local.Transport(), Subscription: subscription, ResourceGroup: group}}
	joins := csrapprover.Joins{
		Attested:     attestation.Verifier{Roots: roots, Issuers: func(string) (*x509.Certificate, error) { return signer.Issuer, nil }, Now: time.Now, MaxAge: attestation.MaxAge},
		Instances:    instances,
		Subscription: subscription,
	}
	attested := func(from string, nonce string) string {
		req := httptest.NewRequest(http.MethodGet, attestation.DocumentURL("http://"+wellknown.IMDSAddress, nonce), nil)
		req.RemoteAddr, req.Header["Metadata"] = from+":40000", []string{"true"}
		w := httptest.NewRecorder()
		meta.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("attested document: HTTP %d %s", w.Code, w.Body)
		}
		return w.Body.String()
	}
	request := func(node string, key *ecdsa.PrivateKey) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: pki.NodeUserPrefix + node, Organization: []string{pki.NodesGroup}}}, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	nonceOf := func(k *ecdsa.PrivateKey) string {
		n, err := attestation.Nonce(k.Public())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	csr := func(node string, key *ecdsa.PrivateKey, doc, instance string, groups ...string) *certv1.CertificateSigningRequest {
		return &certv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "join", UID: "the-judged", ResourceVersion: "20", Annotations: map[string]string{wellknown.AttestedDocumentAnnotation: doc, wellknown.ProviderIDAnnotation: scaleset.ProviderIDPrefix + instance}},
			Spec: certv1.CertificateSigningRequestSpec{SignerName: certv1.KubeAPIServerClientKubeletSignerName, Request: request(node, key),
				Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}, Username: "system:bootstrap:abcdef",
				Groups: append([]string{"system:bootstrappers", "system:authenticated"}, groups...)},
		}
	}
	// A renewal: the node's own certificate asks for the next.
	renewal := func(user, node string, key *ecdsa.PrivateKey, doc, instance string) *certv1.CertificateSigningRequest {
		r := csr(node, key, doc, instance)
		r.Spec.Username, r.Spec.Groups = pki.NodeUserPrefix+user, []string{pki.NodesGroup, "system:authenticated"}
		return r
	}
	alive := false
	joins.Alive = func(context.Context, string) (bool, error) { return alive, nil }
	a, b := meta.Machines["10.0.2.4"], meta.Machines["10.0.2.5"]
	k, other := newKey(), newKey()
	// Documents other requests carry too (as if a node had copied them and found a key with the
	// same nonce), keyed by what they say: the index the approver keeps answers.
	carried := map[string][]*certv1.CertificateSigningRequest{}
	joins.Carrying = func(key string) []*certv1.CertificateSigningRequest { return carried[key] }
	carriedBy := func(doc string, others ...*certv1.CertificateSigningRequest) string {
		var d attestation.Document
		if err := json.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		key, err := attestation.ContentKey(d)
		if err != nil {
			t.Fatal(err)
		}
		carried[key] = others
		return doc
	}
	// The request judged is created at revision 20; the others before or after it.
	at := func(name, revision string, conditions ...certv1.CertificateSigningRequestCondition) *certv1.CertificateSigningRequest {
		uid := types.UID(name)
		if name == "join" { // the judged request itself
			uid = "the-judged"
		}
		return &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, ResourceVersion: revision}, Status: certv1.CertificateSigningRequestStatus{Conditions: conditions}}
	}
	approvedOnce := certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved, Status: "True"}
	refused := certv1.CertificateSigningRequestCondition{Type: certv1.CertificateDenied, Status: "True"}
	reencoded := func(doc string) string {
		out, err := imds.Reencoded(doc)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The groups of the cpu pool's join token, besides every token's.
	cpuToken := pki.PoolJoinGroup("cpu")
	// Each for a key of its own: the metadata service signs the same content for a nonce asked twice
	// within a second.
	kc, kj, kl, kr := newKey(), newKey(), newKey(), newKey()
	copied := carriedBy(attested("10.0.2.4", nonceOf(kc)), at("join", "20"), at("the-original", "10"))
	approvedCopy := carriedBy(attested("10.0.2.4", nonceOf(kj)), at("join", "20"), at("the-original", "30", approvedOnce))
	later := carriedBy(attested("10.0.2.4", nonceOf(kl)), at("join", "20"), at("a-copy", "30"))
	// The original judged again after its copy was refused (its first verdict could not be given).
	rejudged := carriedBy(attested("10.0.2.4", nonceOf(kr)), at("join", "20"), at("a-copy", "30", refused))
	for _, tc := range []struct {
		name    string
		csr     *certv1.CertificateSigningRequest
		approve bool
		reason  string
	}{
		{"its own instance", csr(a.Name, k, attested("10.0.2.4", nonceOf(k)), a.ResourceID, pki.BootstrapGroup, cpuToken), true, "is instance"},
		{"another pool's token", csr(a.Name, k, attested("10.0.2.4", nonceOf(k)), a.ResourceID, pki.BootstrapGroup, pki.PoolJoinGroup("cpu2")), false, "is not its join token"},
		{"another node's name", csr(b.Name, k, attested("10.0.2.4", nonceOf(k)), a.ResourceID, pki.BootstrapGroup, cpuToken), false, "computer name"},
		{"another node's name and instance", csr(b.Name, k, attested("10.0.2.4", nonceOf(k)), b.ResourceID, pki.BootstrapGroup, cpuToken), false, "the attested document is vmId"},
		{"a document bound to another key", csr(a.Name, k, attested("10.0.2.4", nonceOf(other)), a.ResourceID, pki.BootstrapGroup, cpuToken), false, "nonce"},
		{"no document", csr(a.Name, k, "", a.ResourceID, pki.BootstrapGroup, cpuToken), false, "no attested document"},
		{"a control-plane instance", csr("cf-dev-apiserver000000", k, attested("10.0.2.4", nonceOf(k)), strings.ReplaceAll(a.ResourceID, "cf-dev-cpu/", "cf-dev-apiserver/"), pki.BootstrapGroup, cpuToken), false, "the control plane's scale set"},
		{"a scale set the approver may not read", csr("cf-dev-other000000", k, attested("10.0.2.4", nonceOf(k)), strings.ReplaceAll(a.ResourceID, "cf-dev-cpu/", "cf-dev-other/"), pki.BootstrapGroup, cpuToken), false, "403"},
		{"an instance that does not exist", csr("cf-dev-cpu000009", k, attested("10.0.2.4", nonceOf(k)), strings.ReplaceAll(a.ResourceID, "/virtualMachines/0", "/virtualMachines/9"), pki.BootstrapGroup, cpuToken), false, "does not exist"},
		{"another resource group", csr(a.Name, k, attested("10.0.2.4", nonceOf(k)), strings.ReplaceAll(a.ResourceID, "/cf-dev/", "/cf-prod/"), pki.BootstrapGroup, cpuToken), false, "not one of this cluster's worker scale sets"},
		{"a document an earlier request carries", csr(a.Name, kc, copied, a.ResourceID, pki.BootstrapGroup, cpuToken), false, "request the-original carries the same attested document and came first"},
		{"that document re-encoded", csr(a.Name, kc, reencoded(copied), a.ResourceID, pki.BootstrapGroup, cpuToken), false, "request the-original carries the same attested document and came first"},
		{"a document an approved request carried", csr(a.Name, kj, approvedCopy, a.ResourceID, pki.BootstrapGroup, cpuToken), false, "request the-original carried the same attested document and was approved"},
		{"an original whose copy was refused", csr(a.Name, kr, rejudged, a.ResourceID, pki.BootstrapGroup, cpuToken), true, "is instance"},
		{"the first of two requests carrying a document", csr(a.Name, kl, later, a.ResourceID, pki.BootstrapGroup, cpuToken), true, "is instance"},
		{"not the join token", csr(a.Name, k, attested("10.0.2.4", nonceOf(k)), a.ResourceID), false, "not a join or renewal request"},
		{"a join for a node that is alive", csr(a.Name, k, attested("10.0.2.4", nonceOf(k)), a.ResourceID, pki.BootstrapGroup, cpuToken), false, "is alive"},
		{"a renewal by the node itself, alive", renewal(a.Name, a.Name, k, attested("10.0.2.4", nonceOf(k)), a.ResourceID), true, "renewing"},
		{"a renewal of another node's certificate", renewal(a.Name, b.Name, k, attested("10.0.2.4", nonceOf(k)), b.ResourceID), false, "renews its own only"},
		{"a renewal without a document", renewal(a.Name, a.Name, k, "", a.ResourceID), false, "no attested document"},
		{"a renewal with another instance's document", renewal(b.Name, b.Name, k, attested("10.0.2.4", nonceOf(k)), b.ResourceID), false, "the attested document is vmId"},
	} {
		// The node a judged request names renews its lease from the liveness cases on.
		alive = strings.Contains(tc.name, "alive")
		approve, reason, err := joins.Decide(context.Background(), tc.csr)
		if err != nil || approve != tc.approve || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: approve %v (%q, error %v), want %v with %q", tc.name, approve, reason, err, tc.approve, tc.reason)
		}
	}
	// A Node's placement labels come from its instance's scale set, once the instance carries its
	// name, and where it is from the instance; the join already read the instance, so labelling
	// reads nothing more.
	reads := len(srv.Calls())
	want := map[string]string{wellknown.PoolLabel: "cpu", wellknown.GangDomainLabel: "cpu", "topology.kubernetes.io/region": "eastus2", "topology.kubernetes.io/zone": "eastus2-2"}
	if labels, err := instances.Placement(context.Background(), scaleset.ProviderIDPrefix+a.ResourceID, a.Name); err != nil || !maps.Equal(labels, want) {
		t.Errorf("placement of %s: %v, %v; want %v", a.Name, labels, err, want)
	}
	if calls := srv.Calls()[reads:]; len(calls) != 0 {
		t.Errorf("labelling a joined node called Resource Manager again: %+v", calls)
	}
	if labels, err := instances.Placement(context.Background(), scaleset.ProviderIDPrefix+a.ResourceID, b.Name); !errors.Is(err, scaleset.ErrNotClusterInstance) {
		t.Errorf("placement of %s by %s's provider ID: %v, %v; want it refused", b.Name, a.Name, labels, err)
	}
	// Whoever may resize a scale set may rewrite its tags (cluster-autoscaler's identity): a team
	// pool's scale set tagged as the system pool's places no node there.
	retagged := local.GroupID() + "/providers/Microsoft.Compute/virtualMachineScaleSets/cf-dev-cpu2"
	local.Grant(approver, retagged, azurerbac.CustomRoleActions[azurerbac.RoleScaleSetInstanceReader]...)
	srv.AddScaleSet(arm.ScaleSet{Name: "cf-dev-cpu2", ComputerNamePrefix: "cf-dev-cpu2", Image: workerImage, Instances: []*arm.Instance{{}},
		Tags: machine.NodeTemplateTags(spec.ScaleSet{Name: "cpu", Pool: spec.Pool{Name: "cpu", System: true}})})
	if page, err := vms.NewListPager(group, "cf-dev-cpu2", nil).NextPage(context.Background()); err != nil || len(page.Value) != 1 {
		t.Errorf("the retagged scale set's instance: %v", err)
	} else if labels, err := instances.Placement(context.Background(), scaleset.ProviderIDPrefix+*page.Value[0].ID, *page.Value[0].Properties.OSProfile.ComputerName); !errors.Is(err, scaleset.ErrNotClusterInstance) || !strings.Contains(err.Error(), `its name pool "cpu2"`) {
		t.Errorf("placement of an instance of a scale set retagged as another pool's: %v, %v; want it refused", labels, err)
	}

	// Nor may they tag a CPU scale set GPU: its nodes would draw GPU pods. They are placed in their
	// pool without the GPU label; a GPU size so tagged gets it. Nor may they join two InfiniBand
	// fabrics into one gang domain: tagged as another's, or with its single placement group
	// turned off, an InfiniBand scale set keeps its own.
	gpu := true
	for _, tc := range []struct {
		name, size string
		gpu, spg   bool
		domain     string
	}{{"cf-dev-gpu", "Standard_D4ds_v5", false, false, "gpu"}, {"cf-dev-gpu-1", "Standard_NC4as_T4_v3", true, false, "gpu"},
		{"cf-dev-gpu-2", "Standard_ND96isr_H100_v5", true, true, "gpu-2"},
		// Turned off by a scale-set write, an InfiniBand size's single placement group is still one.
		{"cf-dev-gpu-3", "Standard_ND96isr_H100_v5", true, false, "gpu-3"}} {
		local.Grant(approver, local.GroupID()+"/providers/Microsoft.Compute/virtualMachineScaleSets/"+tc.name, azurerbac.CustomRoleActions[azurerbac.RoleScaleSetInstanceReader]...)
		srv.AddScaleSet(arm.ScaleSet{Name: tc.name, SKU: tc.size, ComputerNamePrefix: tc.name, Image: workerImage, Instances: []*arm.Instance{{}}, SinglePlacementGroup: tc.spg,
			Tags: machine.NodeTemplateTags(spec.ScaleSet{Name: "gpu-9", Pool: spec.Pool{Name: "gpu", GPU: &gpu}, SinglePlacementGroup: true})})
		page, err := vms.NewListPager(group, tc.name, nil).NextPage(context.Background())
		if err != nil || len(page.Value) != 1 {
			t.Fatalf("%s's instance: %v", tc.name, err)
		}
		labels, err := instances.Placement(context.Background(), scaleset.ProviderIDPrefix+*page.Value[0].ID, *page.Value[0].Properties.OSProfile.ComputerName)
		if err != nil || labels[wellknown.PoolLabel] != "gpu" || (labels[wellknown.GPULabel] == "true") != tc.gpu || labels[wellknown.GangDomainLabel] != tc.domain {
			t.Errorf("placement of an instance of %s, a %s tagged GPU and gang domain gpu-9: %v, %v; want the gpu pool's label, GPU's %v, gang domain %s",
				tc.name, tc.size, labels, err, tc.gpu, tc.domain)
		}
	}

	// Whoever may resize a worker scale set may write its whole model: cluster-autoscaler's
	// identity adds an extension, or points the model at another image, then grows the set by one.
	// The new instance is genuine and asks with its own document and the pool's token: refused.
	// The instances created before keep their model, and join.
	cpuSet := local.GroupID() + "/providers/Microsoft.Compute/virtualMachineScaleSets/cf-dev-cpu"
	local.Grant(autoscaler, cpuSet, azurerbac.CustomRoleActions[azurerbac.RoleScaleSetScaler]...)
	local.Grant(autoscaler, local.GroupID(), azurerbac.CustomRoleActions[azurerbac.RoleMachineLister]...)
	sets, err := armcompute.NewVirtualMachineScaleSetsClient(subscription, local.Credential(autoscaler), local.Options())
	if err != nil {
		t.Fatal(err)
	}
	alive = false
	foreign := strings.ReplaceAll(workerImage, "/galleries/", "/galleries/someone-elses-")
	extension := []*armcompute.VirtualMachineScaleSetExtension{{Name: to.Ptr("CustomScript"), Properties: &armcompute.VirtualMachineScaleSetExtensionProperties{
		Publisher: to.Ptr("Microsoft.Azure.Extensions"), Type: to.Ptr("CustomScript"), TypeHandlerVersion: to.Ptr("2.1")}}}
	for i, tc := range []struct {
		name       string
		image      string
		extensions []*armcompute.VirtualMachineScaleSetExtension
		approve    bool
		reason     string
	}{
		{"an extension in the model", workerImage, extension, false, "runs extensions [CustomScript]"},
		{"another gallery's image", foreign, []*armcompute.VirtualMachineScaleSetExtension{}, false, "boots image"},
		{"a new version of the cluster's image", strings.Replace(workerImage, "/versions/0.0.0", "/versions/0.0.1", 1), []*armcompute.VirtualMachineScaleSetExtension{}, true, "is instance"},
	} {
		model := armcompute.VirtualMachineScaleSetUpdate{SKU: &armcompute.SKU{Capacity: to.Ptr(int64(3 + i))}, Properties: &armcompute.VirtualMachineScaleSetUpdateProperties{
			VirtualMachineProfile: &armcompute.VirtualMachineScaleSetUpdateVMProfile{
				StorageProfile:   &armcompute.VirtualMachineScaleSetUpdateStorageProfile{ImageReference: &armcompute.ImageReference{ID: to.Ptr(tc.image)}},
				ExtensionProfile: &armcompute.VirtualMachineScaleSetExtensionProfile{Extensions: tc.extensions}}}}
		poller, err := sets.BeginUpdate(context.Background(), group, "cf-dev-cpu", model, nil)
		if err == nil {
			_, err = poller.PollUntilDone(context.Background(), nil)
		}
		if err != nil {
			t.Fatalf("%s: the autoscaler's model write: %v", tc.name, err)
		}
		vm, err := vms.Get(context.Background(), group, "cf-dev-cpu", strconv.Itoa(2+i), nil)
		if err != nil {
			t.Fatalf("%s: the new instance: %v", tc.name, err)
		}
		address := "10.0.2." + strconv.Itoa(10+i)
		grown := imds.InstanceMetadata{Name: *vm.Properties.OSProfile.ComputerName, ResourceID: *vm.ID, VMID: *vm.Properties.VMID}
		meta.Machines[address] = grown
		key := newKey()
		approve, reason, err := joins.Decide(context.Background(), csr(grown.Name, key, attested(address, nonceOf(key)), grown.ResourceID, pki.BootstrapGroup, cpuToken))
		if err != nil || approve != tc.approve || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s, then one more instance: approve %v (%q, error %v), want %v with %q", tc.name, approve, reason, err, tc.approve, tc.reason)
		}
		if i > 0 {
			continue
		}
		// An instance created before, its record read lately for its Node's labels, then upgraded
		// onto that model (a roll's reimage does the same): its renewal is judged on what it runs now.
		if _, err := instances.Placement(context.Background(), scaleset.ProviderIDPrefix+b.ResourceID, b.Name); err != nil {
			t.Fatalf("%s's labels: %v", b.Name, err)
		}
		local.Grant(operator, cpuSet, "Microsoft.Compute/virtualMachineScaleSets/manualUpgrade/action")
		local.Grant(operator, local.GroupID(), "Microsoft.Compute/locations/operations/read")
		operatorSets, err := armcompute.NewVirtualMachineScaleSetsClient(subscription, local.Credential(operator), local.Options())
		if err != nil {
			t.Fatal(err)
		}
		upgrade, err := operatorSets.BeginUpdateInstances(context.Background(), group, "cf-dev-cpu",
			armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: []*string{to.Ptr("1")}}, nil)
		if err == nil {
			_, err = upgrade.PollUntilDone(context.Background(), nil)
		}
		if err != nil {
			t.Fatalf("upgrading %s: %v", b.Name, err)
		}
		renewKey := newKey()
		if approve, reason, err := joins.Decide(context.Background(), renewal(b.Name, b.Name, renewKey, attested("10.0.2.5", nonceOf(renewKey)), b.ResourceID)); approve || !strings.Contains(reason, "runs extensions") {
			t.Errorf("%s's renewal after its upgrade onto that model: approve %v (%q, error %v), want it refused", b.Name, approve, reason, err)
		}
	}
	fresh := newKey()
	if approve, reason, err := joins.Decide(context.Background(), csr(a.Name, fresh, attested("10.0.2.4", nonceOf(fresh)), a.ResourceID, pki.BootstrapGroup, cpuToken)); !approve {
		t.Errorf("an instance created before the model writes, never upgraded: approve %v (%q, error %v), want it approved", approve, reason, err)
	}

	// Resource Manager not answering is no verdict: the request waits for a retry (an approver
	// that has not read the instance yet).
	joins.Instances = &csrapprover.WorkerInstances{Cred: local.Credential(approver), ControlPlane: "cf-dev-apiserver",
		Access: &scaleset.Access{Cloud: local.Cloud(), Transport: local.Transport(), Subscription: subscription, ResourceGroup: group}}
	local.HTTP.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if approve, reason, err := joins.Decide(ctx, csr(a.Name, k, attested("10.0.2.4", nonceOf(k)), a.ResourceID, pki.BootstrapGroup)); approve || err == nil {
		t.Errorf("Resource Manager down: approve %v (%q), want an error to retry", approve, reason)
	}
}
