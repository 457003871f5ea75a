package csrapprover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// clientUsages are what a kubelet client certificate may be used for.
var clientUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageClientAuth}

// Instances tells a worker instance's vmId and placement labels (its pool among them), once the
// instance a node's provider ID names is one of the cluster's workers and carries the node's name;
// an instance that is not is scaleset.ErrNotClusterInstance.
type Instances interface {
	VMID(ctx context.Context, providerID, name string) (string, error)
	Placement
}

// WorkerInstances reads instances through Resource Manager: of any scale set in the cluster's
// resource group but ControlPlane, as far as the approver's identity may read them. Its reader
// role is assigned on each worker scale set with the pool, so a pool added changes nothing on the
// apiserver machines, and an instance of any other scale set is refused by Azure (403).
type WorkerInstances struct {
	Access *scaleset.Access
	Cred   azcore.TokenCredential
	// ControlPlane is the apiservers' own scale set.
	ControlPlane string
	// Images are the image definitions a worker instance may boot versions of
	// (spec.WorkerImageDefinitions); none refuses every instance.
	Images []string

	labels lately[map[string]string] // by scale set
	// seen are the instances read lately, by provider ID and node name: a join's lookup serves
	// its Node's labelling, so a joining node costs Resource Manager one instance read, not two.
	seen lately[scaleset.Record]
	// addresses are the instances' addresses read lately, by provider ID and node name: a node
	// asking for serving certificates in a loop costs one read of its interface a TTL.
	addresses lately[[]netip.Addr]
}

// memoryBound is how many entries a memory of the approver holds before it drops the stale ones.
const memoryBound = 20_000

// lately keeps what was read from Resource Manager, by key, for as long as its reader says,
// dropping the stale values once it holds memoryBound.
type lately[V any] struct {
	mu     sync.Mutex
	values map[string]readAt[V]
}

type readAt[V any] struct {
	value V
	read  time.Time
}

func (l *lately[V]) get(key string, ttl time.Duration) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.values[key]
	return r.value, ok && time.Since(r.read) < ttl
}

func (l *lately[V]) put(key string, value V, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.values == nil {
		l.values = map[string]readAt[V]{}
	}
	if len(l.values) >= memoryBound {
		maps.DeleteFunc(l.values, func(_ string, r readAt[V]) bool { return time.Since(r.read) >= ttl })
	}
	l.values[key] = readAt[V]{value, time.Now()}
}

// VMID reads the instance providerID names afresh: a join or renewal is judged on what Resource
// Manager says now, not on a record from before a reimage onto another model.
func (w *WorkerInstances) VMID(ctx context.Context, providerID, name string) (string, error) {
	vmID, _, err := w.instance(ctx, providerID, name, true)
	return vmID, err
}

// Placement reads the labels the approver gives the worker a Node named name is, by its provider
// ID: the instance must carry the Node's name and run the cluster's model; its scale set's
// node-template tags give the placement labels (wellknown.PlacementLabels), the instance itself
// its region and zone.
func (w *WorkerInstances) Placement(ctx context.Context, providerID, name string) (map[string]string, error) {
	_, labels, err := w.instance(ctx, providerID, name, false)
	return labels, err
}

// labelsTTL is how long a scale set's placement labels, or an instance's addresses, are kept
// before they are read again, and seenTTL how long an instance read is: a node registers within
// minutes of its join.
const (
	labelsTTL = 10 * time.Minute
	seenTTL   = time.Hour
)

// instance reads the instance providerID names, checked to carry name and to run a model this
// cluster wrote, and the labels its Node gets; fresh skips the record read lately.
func (w *WorkerInstances) instance(ctx context.Context, providerID, name string, fresh bool) (string, map[string]string, error) {
	m, err := w.machines(providerID)
	if err != nil {
		return "", nil, err
	}
	key := providerID + " " + name
	r, ok := w.seen.get(key, seenTTL)
	if !ok || fresh {
		if r, err = m.Record(ctx, providerID, name); err != nil {
			return "", nil, err
		}
		w.seen.put(key, r, seenTTL)
	}
	if err := w.ourModel(providerID, r); err != nil {
		return "", nil, err
	}
	setLabels, err := w.setLabels(ctx, m)
	if err != nil {
		return "", nil, err
	}
	labels := maps.Clone(setLabels)
	labels[wellknown.RegionLabel] = wellknown.RegionLabelValue(r.Location)
	if r.Zone != "" {
		labels[wellknown.ZoneLabel] = wellknown.ZoneLabelValue(r.Location, r.Zone)
	}
	return r.VMID, labels, nil
}

// ourModel refuses an instance whose model this cluster did not write: an image that is no
// version of the worker image definitions, or any extension (worker models have none). Whoever
// may resize a worker scale set (cluster-autoscaler) may write its whole model, and would
// otherwise grow it into genuine instances that run their code as root and join.
func (w *WorkerInstances) ourModel(providerID string, r scaleset.Record) error {
	if !w.ourImage(r.Image) {
		return fmt.Errorf("instance %s boots image %q, no version of the cluster's worker images %v: %w", providerID, r.Image, w.Images, scaleset.ErrNotClusterInstance)
	}
	if len(r.Extensions) > 0 {
		return fmt.Errorf("instance %s runs extensions %v, which no worker model of the cluster has: %w", providerID, r.Extensions, scaleset.ErrNotClusterInstance)
	}
	return nil
}

// ourImage says whether image is a version of one of the worker image definitions.
func (w *WorkerInstances) ourImage(image string) bool {
	return image != "" && slices.ContainsFunc(w.Images, func(def string) bool { return def != "" && strings.EqualFold(spec.ImageDefinition(image), def) })
}

// ourScaleSetModel refuses a scale set whose model this cluster did not write: an upgrade policy
// other than Manual would carry a model's extensions to the instances already running, whose
// nodes hold their certificates; an extension or a foreign image in the model would reach every
// instance it makes. Its nodes then join and renew no more, and the approver says why.
func (w *WorkerInstances) ourScaleSetModel(ss *armcompute.VirtualMachineScaleSet) error {
	p := ss.Properties
	if p == nil {
		return nil
	}
	if p.UpgradePolicy != nil && p.UpgradePolicy.Mode != nil && *p.UpgradePolicy.Mode != armcompute.UpgradeModeManual {
		return fmt.Errorf("scale set %s's upgrade policy is %s, not Manual: %w", *ss.Name, *p.UpgradePolicy.Mode, scaleset.ErrNotClusterInstance)
	}
	vm := p.VirtualMachineProfile
	if vm == nil {
		return nil
	}
	if vm.ExtensionProfile != nil && len(vm.ExtensionProfile.Extensions) > 0 {
		return fmt.Errorf("scale set %s's model runs %d extensions, which no worker model of the cluster has: %w", *ss.Name, len(vm.ExtensionProfile.Extensions), scaleset.ErrNotClusterInstance)
	}
	if vm.StorageProfile != nil && vm.StorageProfile.ImageReference != nil && vm.StorageProfile.ImageReference.ID != nil && !w.ourImage(*vm.StorageProfile.ImageReference.ID) {
		return fmt.Errorf("scale set %s's model boots image %q, no version of the cluster's worker images: %w", *ss.Name, *vm.StorageProfile.ImageReference.ID, scaleset.ErrNotClusterInstance)
	}
	return nil
}

// setLabels reads the placement labels of m's scale set: a scale set without a pool tag is no
// worker's, whatever the approver's identity may read.
func (w *WorkerInstances) setLabels(ctx context.Context, m *scaleset.Machines) (map[string]string, error) {
	set := m.ScaleSets[0]
	if labels, ok := w.labels.get(set, labelsTTL); ok {
		return labels, nil
	}
	sets, err := w.Access.ScaleSetsAs(w.Cred)
	if err != nil {
		return nil, err
	}
	ss, err := sets.Get(ctx, m.ResourceGroup, set, nil)
	if err != nil {
		return nil, err
	}
	if err := w.ourScaleSetModel(&ss.VirtualMachineScaleSet); err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for tag, value := range ss.Tags {
		if key, ok := wellknown.TagLabel(tag); ok && value != nil && slices.Contains(wellknown.PlacementLabels, key) {
			labels[key] = *value
		}
	}
	if labels[wellknown.PoolLabel] == "" {
		return nil, fmt.Errorf("scale set %s has no %s tag, so it is no worker pool's: %w", set, wellknown.LabelTag(wellknown.PoolLabel), scaleset.ErrNotClusterInstance)
	}
	// The tags are writable by whoever may resize the scale set (cluster-autoscaler); its name is not.
	if pool, ok := spec.PoolOfScaleSet(m.ResourceGroup, set); !ok || pool != labels[wellknown.PoolLabel] {
		return nil, fmt.Errorf("scale set %s's %s tag names pool %q, its name pool %q: %w", set, wellknown.LabelTag(wellknown.PoolLabel),
			labels[wellknown.PoolLabel], pool, scaleset.ErrNotClusterInstance)
	}
	// Nor is the gang domain: it follows from the name and the placement group. A single placement
	// group a scale-set write turned off (Azure allows that way) keeps its own domain while its
	// size is an InfiniBand one, so no write merges two fabrics' domains.
	spg := ss.Properties != nil && ss.Properties.SinglePlacementGroup != nil && *ss.Properties.SinglePlacementGroup
	if size, ok := spec.VMCapacity(skuName(ss.SKU)); ok && size.InfiniBand {
		spg = true
	}
	labels[wellknown.GangDomainLabel], _ = spec.GangDomainOfScaleSet(m.ResourceGroup, set, spg) // its pool checked above
	// Nor is the GPU tag: a CPU scale set's nodes labelled GPU would draw GPU pods they cannot run.
	// They are labelled no GPU's, and still join and renew.
	if labels[wellknown.GPULabel] != "" && !hasGPUs(skuName(ss.SKU)) {
		klog.Warningf("scale set %s's %s tag says GPU, but its size has no GPUs: its nodes are not labelled GPU", set, wellknown.LabelTag(wellknown.GPULabel))
		delete(labels, wellknown.GPULabel)
	}
	w.labels.put(set, labels, labelsTTL)
	return labels, nil
}

// skuName is a scale set's size, "" when it reports none.
func skuName(sku *armcompute.SKU) string {
	if sku == nil || sku.Name == nil {
		return ""
	}
	return *sku.Name
}

// hasGPUs says whether the VM size has GPUs, as the sizes table knows it (an unknown size has none).
func hasGPUs(size string) bool {
	c, _ := spec.VMCapacity(size)
	return c.GPUs > 0
}

// Addresses reads the addresses of the instance providerID names, checked to carry name.
func (w *WorkerInstances) Addresses(ctx context.Context, providerID, name string) ([]netip.Addr, error) {
	key := providerID + " " + name
	if addrs, ok := w.addresses.get(key, labelsTTL); ok {
		return addrs, nil
	}
	m, err := w.machines(providerID)
	if err != nil {
		return nil, err
	}
	addrs, err := m.Addresses(ctx, providerID, name)
	if err == nil {
		w.addresses.put(key, addrs, labelsTTL)
	}
	return addrs, err
}

// machines reaches the one scale set providerID names, refusing the control plane's.
func (w *WorkerInstances) machines(providerID string) (*scaleset.Machines, error) {
	in, err := scaleset.ParseProviderID(providerID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, scaleset.ErrNotClusterInstance)
	}
	if strings.EqualFold(in.ScaleSet, w.ControlPlane) {
		return nil, fmt.Errorf("%s is the control plane's scale set: %w", in.ScaleSet, scaleset.ErrNotClusterInstance)
	}
	access := *w.Access
	access.ScaleSets = []string{in.ScaleSet}
	return access.MachinesAs(w.Cred)
}

// Joins judges the client certificate requests of joining nodes. The join token is in every
// worker's scale-set model, so it proves only that the requester joins some worker; the node name
// is proven by Azure: the request carries its instance's attested document, whose nonce is bound
// to the request's key, and the instance it names is looked up by its resource ID, whose vmId
// must be the document's and whose computer name the node's.
type Joins struct {
	Attested     attestation.Verifier
	Instances    Instances
	Subscription string
	// Carrying returns the join requests whose attested documents say the same
	// (attestation.ContentKey), however they are encoded.
	Carrying func(contentKey string) []*certv1.CertificateSigningRequest
	// Alive says whether the node named name still renews its lease: its instance has its
	// identity, and joins again only once that node has stopped (a reimage, a repair).
	Alive func(ctx context.Context, name string) (bool, error)
	// Judged remembers the documents and instances judged lately; nil remembers nothing.
	Judged *Judged
}

// Judged remembers, for as long as a document is valid (attestation.MaxAge), the request that
// first carried each document judged, and each instance's requests. A copy judged after its
// original was refused and removed is still a copy; and an instance asking more than
// JoinsPerInstance times in that span (a join token's holder or a node asking in a loop, with fresh
// documents of its own instance) is refused before Resource Manager is asked.
type Judged struct {
	mu    sync.Mutex
	first map[string]judgedRequest   // by attestation.ContentKey
	asked map[string][]judgedRequest // by vmId
}

// judgedRequest is one request, by its UID: a refused request is removed at once, and its name
// may then be taken by another.
type judgedRequest struct {
	name string
	uid  types.UID
	at   time.Time
}

// JoinsPerInstance is how many join requests one instance may have judged within
// attestation.MaxAge: a node refused for a passing reason asks again every 30 s, and a reimaged
// one is refused while its old node's lease runs out.
const JoinsPerInstance = 5

// firstCarrier records csr as the first request judged to carry the document contentKey, unless
// another was; it returns the first one.
func (j *Judged) firstCarrier(contentKey string, csr *certv1.CertificateSigningRequest) judgedRequest {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.forget()
	if first, ok := j.first[contentKey]; ok {
		return first
	}
	if j.first == nil {
		j.first = map[string]judgedRequest{}
	}
	j.first[contentKey] = judgedRequest{csr.Name, csr.UID, time.Now()}
	return j.first[contentKey]
}

// ask records the request name of the instance vmID and says whether it is within the
// instance's JoinsPerInstance over the last attestation.MaxAge; a request judged again (Resource
// Manager did not answer) counts once.
func (j *Judged) ask(vmID string, csr *certv1.CertificateSigningRequest) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.forget()
	asked := slices.DeleteFunc(j.asked[vmID], stale)
	if slices.ContainsFunc(asked, func(r judgedRequest) bool { return r.uid == csr.UID }) {
		return true
	}
	if len(asked) >= JoinsPerInstance {
		return false
	}
	if j.asked == nil {
		j.asked = map[string][]judgedRequest{}
	}
	j.asked[vmID] = append(asked, judgedRequest{csr.Name, csr.UID, time.Now()})
	return true
}

// forget drops what is older than a document's life, when the memory has grown: every request
// it holds passed the document's checks, so it grows with the instances joining, and with one
// request per JoinsPerInstance of a looping one.
func (j *Judged) forget() {
	if len(j.first)+len(j.asked) < memoryBound {
		return
	}
	maps.DeleteFunc(j.first, func(_ string, r judgedRequest) bool { return stale(r) })
	maps.DeleteFunc(j.asked, func(_ string, rs []judgedRequest) bool {
		return !slices.ContainsFunc(rs, func(r judgedRequest) bool { return !stale(r) })
	})
}

// stale is a request judged longer ago than a document lives.
func stale(r judgedRequest) bool { return time.Since(r.at) > attestation.MaxAge }

// IsJoin says whether the request is a joining node's, made with the join token.
func IsJoin(csr *certv1.CertificateSigningRequest) bool {
	return csr.Spec.SignerName == certv1.KubeAPIServerClientKubeletSignerName && slices.Contains(csr.Spec.Groups, pki.BootstrapGroup)
}

// IsRenewal says whether the request is a node's for its next client certificate, made with its
// current one. kube-controller-manager approves none (no selfnodeclient grant): a renewal proves
// the instance again, as a join does.
func IsRenewal(csr *certv1.CertificateSigningRequest) bool {
	return csr.Spec.SignerName == certv1.KubeAPIServerClientKubeletSignerName && slices.Contains(csr.Spec.Groups, pki.NodesGroup) &&
		strings.HasPrefix(csr.Spec.Username, pki.NodeUserPrefix)
}

// isClientRequest is a join or a renewal: a request the attested document decides.
func isClientRequest(csr *certv1.CertificateSigningRequest) bool {
	return IsJoin(csr) || IsRenewal(csr)
}

// Decide approves a join or renewal request that passes every check, denies one that fails, and
// returns an error when it cannot tell yet (Resource Manager did not answer), to be tried again.
// A renewal is judged as a join is, but asks for its requester's own name only, and its node
// may be alive (it is).
func (j Joins) Decide(ctx context.Context, csr *certv1.CertificateSigningRequest) (approve bool, reason string, err error) {
	renewal := IsRenewal(csr)
	if !IsJoin(csr) && !renewal {
		return false, "not a join or renewal request", nil
	}
	req, reason := nodeRequest(csr, clientUsages, certv1.UsageClientAuth)
	if req == nil {
		return false, reason, nil
	}
	name, ok := strings.CutPrefix(req.Subject.CommonName, pki.NodeUserPrefix)
	switch {
	case !ok || name == "":
		return false, fmt.Sprintf("subject %q is not a node", req.Subject.CommonName), nil
	case len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0:
		return false, "a client certificate names no hosts", nil
	case renewal && req.Subject.CommonName != csr.Spec.Username:
		return false, fmt.Sprintf("%s asks for %s's certificate: a node renews its own only", csr.Spec.Username, req.Subject.CommonName), nil
	}
	document := csr.Annotations[wellknown.AttestedDocumentAnnotation]
	var doc attestation.Document
	if err := json.Unmarshal([]byte(document), &doc); err != nil {
		return false, fmt.Sprintf("no attested document (%s): %v", wellknown.AttestedDocumentAnnotation, err), nil
	}
	// A document vouches for one request, the first to carry it. Whoever may read requests (nodes
	// may) could copy one, re-encoded or not, and search for a key whose nonce matches (ten
	// digits): the copy comes later, so it is refused. A refused request blocks nothing, so an
	// original judged again (Resource Manager did not answer) is not held up by its refused copy;
	// a copy of an original refused and removed is still refused, by what Judged remembers.
	key, err := attestation.ContentKey(doc)
	if err != nil {
		return false, err.Error(), nil
	}
	if j.Carrying != nil {
		for _, other := range j.Carrying(key) {
			if other.UID == csr.UID {
				continue
			}
			if approved(other) {
				return false, fmt.Sprintf("request %s carried the same attested document and was approved: a document vouches for one request", other.Name), nil
			}
			if pending(other) && createdBefore(other, csr) {
				return false, fmt.Sprintf("request %s carries the same attested document and came first: a document vouches for one request", other.Name), nil
			}
		}
	}
	payload, err := j.Attested.Verify(doc)
	if err != nil {
		return false, err.Error(), nil
	}
	nonce, err := attestation.Nonce(req.PublicKey)
	if err != nil {
		return false, fmt.Sprintf("request key: %v", err), nil
	}
	switch {
	case payload.Nonce != nonce:
		return false, fmt.Sprintf("the attested document's nonce %q is not the request key's %q", payload.Nonce, nonce), nil
	case !strings.EqualFold(payload.SubscriptionID, j.Subscription):
		return false, fmt.Sprintf("attested in subscription %s, not the cluster's", payload.SubscriptionID), nil
	}
	// Past here the document is genuine and the request's own: it is judged once, whatever
	// becomes of the request, and counts against its instance.
	if j.Judged != nil {
		if first := j.Judged.firstCarrier(key, csr); first.uid != csr.UID {
			return false, fmt.Sprintf("request %s (uid %s) carried the same attested document and was judged: a document vouches for one request", first.name, first.uid), nil
		}
		if !j.Judged.ask(strings.ToLower(payload.VMID), csr) {
			return false, fmt.Sprintf("instance vmId %s asked for a certificate more than %d times in %v", payload.VMID, JoinsPerInstance, attestation.MaxAge), nil
		}
	}
	instance := csr.Annotations[wellknown.ProviderIDAnnotation]
	vmID, err := j.Instances.VMID(ctx, instance, name)
	if errors.Is(err, scaleset.ErrNotClusterInstance) {
		return false, err.Error(), nil
	}
	if err != nil {
		return false, "", err
	}
	if !strings.EqualFold(vmID, payload.VMID) {
		return false, fmt.Sprintf("node %s names instance %s (vmId %s), but the attested document is vmId %s's", name, instance, vmID, payload.VMID), nil
	}
	if renewal {
		return true, fmt.Sprintf("node %s is instance %s (vmId %s), renewing", name, instance, vmID), nil
	}
	// A pool's token joins its own pool's instances only (the read is the one VMID made).
	labels, err := j.Instances.Placement(ctx, instance, name)
	if errors.Is(err, scaleset.ErrNotClusterInstance) {
		return false, err.Error(), nil
	}
	if err != nil {
		return false, "", err
	}
	if pool := labels[wellknown.PoolLabel]; !slices.Contains(csr.Spec.Groups, pki.PoolJoinGroup(pool)) {
		return false, fmt.Sprintf("instance %s is pool %s's, and %s is not its join token", instance, pool, csr.Spec.Username), nil
	}
	if j.Alive != nil {
		alive, err := j.Alive(ctx, name)
		if err != nil {
			return false, "", err
		}
		if alive {
			return false, fmt.Sprintf("node %s is alive (its lease is renewed): its instance has its identity, and joins again once that node has stopped", name), nil
		}
	}
	return true, fmt.Sprintf("node %s is instance %s (vmId %s)", name, instance, vmID), nil
}

func pending(csr *certv1.CertificateSigningRequest) bool { return len(csr.Status.Conditions) == 0 }

func approved(csr *certv1.CertificateSigningRequest) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certv1.CertificateSigningRequestCondition) bool { return c.Type == certv1.CertificateApproved })
}

// createdBefore orders two pending requests by creation. A request's spec is immutable and no
// requester may update its metadata, so a pending request's resource version is etcd's revision
// at its creation; when either is not a number, a is taken to be first, which refuses b.
func createdBefore(a, b *certv1.CertificateSigningRequest) bool {
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return errA != nil || errB != nil || ra < rb
}
