package csrapprover

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	certv1 "k8s.io/api/certificates/v1"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// AttestationMaxAge is how old an attested document may be when its request is judged: a node
// asks for it just before it makes the request, and asks again on a refusal.
const AttestationMaxAge = 10 * time.Minute

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
}

// VMID reads the instance providerID names.
func (w WorkerInstances) VMID(ctx context.Context, providerID, name string) (string, error) {
	in, err := scaleset.ParseProviderID(providerID)
	if err != nil {
		return "", fmt.Errorf("%w: %w", err, scaleset.ErrNotClusterInstance)
	}
	if strings.EqualFold(in.ScaleSet, w.ControlPlane) {
		return "", fmt.Errorf("%s is the control plane's scale set: %w", in.ScaleSet, scaleset.ErrNotClusterInstance)
	}
	access := *w.Access
	access.ScaleSets = []string{in.ScaleSet}
	m, err := access.MachinesAs(w.Cred)
	if err != nil {
		return "", err
	}
	return m.VMID(ctx, providerID, name)
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
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(clientUsages, u) {
			return false, fmt.Sprintf("usage %q is not for a client", u), nil
		}
	}
	if !slices.Contains(csr.Spec.Usages, certv1.UsageClientAuth) {
		return false, "no client auth usage", nil
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return false, "the request is not a PEM certificate request", nil
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return false, fmt.Sprintf("unreadable request: %v", err), nil
	}
	if err := req.CheckSignature(); err != nil {
		return false, fmt.Sprintf("bad request signature: %v", err), nil
	}
	name, ok := strings.CutPrefix(req.Subject.CommonName, "system:node:")
	switch {
	case !ok || name == "":
		return false, fmt.Sprintf("subject %q is not a node", req.Subject.CommonName), nil
	case !slices.Equal(req.Subject.Organization, []string{pki.NodesGroup}):
		return false, fmt.Sprintf("organization %q, want system:nodes", req.Subject.Organization), nil
	case len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0:
		return false, "a client certificate names no hosts", nil
	}
	var doc attestation.Document
	if err := json.Unmarshal([]byte(csr.Annotations[wellknown.AttestedDocumentAnnotation]), &doc); err != nil {
		return false, fmt.Sprintf("no attested document (%s): %v", wellknown.AttestedDocumentAnnotation, err), nil
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
	instance := csr.Annotations[wellknown.InstanceAnnotation]
	vmID, err := j.Instances.VMID(ctx, "azure://"+instance, name)
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
