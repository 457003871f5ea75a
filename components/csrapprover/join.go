package csrapprover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	certv1 "k8s.io/api/certificates/v1"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// clientUsages are what a kubelet client certificate may be used for.
var clientUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageClientAuth}

// Instances tells a worker instance's vmId, once the instance a node's provider ID names is one
// of the cluster's workers and carries the node's name; an instance that is not is
// scaleset.ErrNotClusterInstance.
type Instances interface {
	VMID(ctx context.Context, providerID, name string) (string, error)
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

	mu     sync.Mutex
	labels map[string]scaleSetLabels // by scale set
	// seen are the instances read lately, by provider ID and node name: a join's lookup serves its
	// Node's labelling, so a joining node costs Resource Manager one instance read, not two.
	seen map[string]seenInstance
}

// VMID reads the instance providerID names.
func (w *WorkerInstances) VMID(ctx context.Context, providerID, name string) (string, error) {
	vmID, _, err := w.instance(ctx, providerID, name)
	return vmID, err
}

// Placement reads the placement labels (wellknown.PlacementLabels) of the worker a Node named name
// is, by its provider ID: the instance must carry the Node's name, and its scale set's
// node-template tags give the labels.
func (w *WorkerInstances) Placement(ctx context.Context, providerID, name string) (map[string]string, error) {
	_, labels, err := w.instance(ctx, providerID, name)
	return labels, err
}

// labelsTTL is how long a scale set's placement labels are kept before they are read again, and
// seenTTL how long an instance read is: a node registers within minutes of its join.
const (
	labelsTTL = 10 * time.Minute
	seenTTL   = time.Hour
)

type scaleSetLabels struct {
	labels map[string]string
	read   time.Time
}

type seenInstance struct {
	vmID string
	read time.Time
}

// instance reads the instance providerID names, checked to carry name, and its scale set's
// placement labels: a scale set without a pool tag is no worker's, whatever the approver's
// identity may read.
func (w *WorkerInstances) instance(ctx context.Context, providerID, name string) (string, map[string]string, error) {
	m, err := w.machines(providerID)
	if err != nil {
		return "", nil, err
	}
	key := providerID + " " + name
	w.mu.Lock()
	seen, ok := w.seen[key]
	w.mu.Unlock()
	vmID := seen.vmID
	if !ok || time.Since(seen.read) > seenTTL {
		if vmID, err = m.VMID(ctx, providerID, name); err != nil {
			return "", nil, err
		}
		w.remember(key, vmID)
	}
	set := m.ScaleSets[0]
	w.mu.Lock()
	cached, ok := w.labels[set]
	w.mu.Unlock()
	if ok && time.Since(cached.read) < labelsTTL {
		return vmID, cached.labels, nil
	}
	sets, err := w.Access.ScaleSetsAs(w.Cred)
	if err != nil {
		return "", nil, err
	}
	ss, err := sets.Get(ctx, m.ResourceGroup, set, nil)
	if err != nil {
		return "", nil, err
	}
	labels := map[string]string{}
	for tag, value := range ss.Tags {
		if key, ok := wellknown.TagLabel(tag); ok && value != nil && slices.Contains(wellknown.PlacementLabels, key) {
			labels[key] = *value
		}
	}
	if labels[wellknown.PoolLabel] == "" {
		return "", nil, fmt.Errorf("scale set %s has no %s tag, so it is no worker pool's: %w", set, wellknown.LabelTag(wellknown.PoolLabel), scaleset.ErrNotClusterInstance)
	}
	w.mu.Lock()
	if w.labels == nil {
		w.labels = map[string]scaleSetLabels{}
	}
	w.labels[set] = scaleSetLabels{labels, time.Now()}
	w.mu.Unlock()
	return vmID, labels, nil
}

// remember keeps an instance read, dropping the stale ones as the map grows.
func (w *WorkerInstances) remember(key, vmID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]seenInstance{}
	}
	if len(w.seen) >= 20_000 {
		maps.DeleteFunc(w.seen, func(_ string, s seenInstance) bool { return time.Since(s.read) > seenTTL })
	}
	w.seen[key] = seenInstance{vmID, time.Now()}
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
}

// IsJoin says whether the request is a joining node's, made with the join token; renewals by a
// node's own certificate are kube-controller-manager's (selfnodeclient).
func IsJoin(csr *certv1.CertificateSigningRequest) bool {
	return csr.Spec.SignerName == certv1.KubeAPIServerClientKubeletSignerName && slices.Contains(csr.Spec.Groups, pki.BootstrapGroup)
}

// Decide approves a join request that passes every check, denies one that fails, and returns an
// error when it cannot tell yet (Resource Manager did not answer), to be tried again.
func (j Joins) Decide(ctx context.Context, csr *certv1.CertificateSigningRequest) (approve bool, reason string, err error) {
	if !IsJoin(csr) {
		return false, "not a join request", nil
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
	// a copy of a refused original fails that original's checks in turn (same document, same
	// instance).
	key, err := attestation.ContentKey(doc)
	if err != nil {
		return false, err.Error(), nil
	}
	if j.Carrying != nil {
		for _, other := range j.Carrying(key) {
			if other.Name == csr.Name {
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
