// Package csrapprover approves the certificates of kubelets after checking each requester is the
// node it claims to be: a joining node's client certificate (join.go) and every kubelet's serving
// certificate. kube-controller-manager approves only the renewal of a client certificate by the
// node that holds it. A serving certificate names addresses, and a node that could name any
// address could pose as any kubelet to the apiserver (which verifies kubelet certificates, CIS
// 1.2.5). It runs on the apiserver machines, one leader at a time, with a cluster-level cache of
// nodes and CSRs.
package csrapprover

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/clusterforge/clusterforge/components/leader"
	"github.com/clusterforge/clusterforge/components/pki"
)

// Reason is the condition reason the approver sets, approving or denying.
const Reason = "ClusterforgeNodeIdentity"

// allowedUsages are what a kubelet serving certificate may be used for.
var allowedUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth}

// Decide judges a kubelet-serving CSR against the Node object of its requester: the requester is
// the node (system:node:<name> in system:nodes), the request names that node and nothing else,
// asks to serve and no more, and its addresses are the node's own InternalIPs inside the node
// subnet. NodeRestriction lets a kubelet write only its own Node, so a node cannot borrow another
// node's address through it. node is nil when no such Node exists.
func Decide(csr *certv1.CertificateSigningRequest, node *corev1.Node, nodeSubnet netip.Prefix) (approve bool, reason string) {
	name, ok := strings.CutPrefix(csr.Spec.Username, "system:node:")
	switch {
	case csr.Spec.SignerName != certv1.KubeletServingSignerName:
		return false, "not a kubelet serving certificate"
	case !ok || !slices.Contains(csr.Spec.Groups, pki.NodesGroup):
		return false, fmt.Sprintf("requested by %q, not a node", csr.Spec.Username)
	case node == nil || node.Name != name:
		return false, fmt.Sprintf("no Node %q", name)
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(allowedUsages, u) {
			return false, fmt.Sprintf("usage %q is not for serving", u)
		}
	}
	if !slices.Contains(csr.Spec.Usages, certv1.UsageServerAuth) {
		return false, "no server auth usage"
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return false, "the request is not a PEM certificate request"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return false, fmt.Sprintf("unreadable request: %v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return false, fmt.Sprintf("bad request signature: %v", err)
	}
	switch {
	case req.Subject.CommonName != csr.Spec.Username:
		return false, fmt.Sprintf("subject %q is not the requester", req.Subject.CommonName)
	case !slices.Equal(req.Subject.Organization, []string{pki.NodesGroup}):
		return false, fmt.Sprintf("organization %q, want system:nodes", req.Subject.Organization)
	case len(req.EmailAddresses) > 0 || len(req.URIs) > 0:
		return false, "e-mail or URI names"
	case len(req.DNSNames) == 0 && len(req.IPAddresses) == 0:
		return false, "no names"
	}
	for _, dns := range req.DNSNames {
		if dns != name && !nodeHasAddress(node, corev1.NodeHostName, dns) {
			return false, fmt.Sprintf("DNS name %q is not the node's", dns)
		}
	}
	for _, ip := range req.IPAddresses {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok || !nodeSubnet.Contains(addr.Unmap()) {
			return false, fmt.Sprintf("address %s is outside the node subnet %s", ip, nodeSubnet)
		}
		if !nodeHasAddress(node, corev1.NodeInternalIP, addr.Unmap().String()) {
			return false, fmt.Sprintf("address %s is not one of the node's", ip)
		}
	}
	return true, fmt.Sprintf("node %s serving %v %v", name, req.DNSNames, req.IPAddresses)
}

func nodeHasAddress(n *corev1.Node, kind corev1.NodeAddressType, value string) bool {
	return slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool { return a.Type == kind && a.Address == value })
}

// Config is what one approver needs.
type Config struct {
	Client     kubernetes.Interface
	NodeSubnet netip.Prefix
	// Joins judges joining nodes' client certificates; nil leaves them to others.
	Joins *Joins
	// Identity names this candidate in the leader election (the machine's name).
	Identity string
	// Lease is the leader election's lease in kube-system.
	Lease string
}

// Run approves or denies pending kubelet serving CSRs, and joining nodes' client CSRs, while this
// candidate leads, standing for election again each time it loses the lease, until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	return leader.Run(ctx, leader.Election{Client: cfg.Client, Namespace: metav1.NamespaceSystem, Lease: cfg.Lease,
		Identity: cfg.Identity, Logf: klog.Infof}, func(ctx context.Context) { lead(ctx, cfg) })
}

// lead watches nodes and CSRs through one shared cache and judges each pending CSR it owns, one
// at a time from a queue; a request it cannot judge yet (Resource Manager did not answer) is tried
// again with backoff.
func lead(ctx context.Context, cfg Config) {
	factory := informers.NewSharedInformerFactory(cfg.Client, 10*time.Minute)
	nodeInformer := factory.Core().V1().Nodes()
	nodeInformer.Informer()
	csrInformer := factory.Certificates().V1().CertificateSigningRequests()
	csrs := csrInformer.Informer()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if csr, ok := obj.(*certv1.CertificateSigningRequest); ok && len(csr.Status.Conditions) == 0 && cfg.owns(csr) {
			queue.Add(csr.Name)
		}
	}
	// Added after the caches synced: the pending CSRs arrive first, as adds.
	if _, err := csrs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }}); err != nil {
		klog.Errorf("watch CSRs: %v", err)
		return
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		name, quit := queue.Get()
		if quit {
			return
		}
		csr, err := csrInformer.Lister().Get(name)
		if err == nil && len(csr.Status.Conditions) == 0 {
			err = cfg.judge(ctx, csr, nodeInformer.Lister().Get)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			klog.Errorf("csr %s: %v (will retry)", name, err)
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// owns says whether the request is one this approver judges.
func (cfg Config) owns(csr *certv1.CertificateSigningRequest) bool {
	return csr.Spec.SignerName == certv1.KubeletServingSignerName || (cfg.Joins != nil && IsJoin(csr))
}

// judge decides one pending request and records the verdict.
func (cfg Config) judge(ctx context.Context, csr *certv1.CertificateSigningRequest, cachedNode func(string) (*corev1.Node, error)) error {
	var approve bool
	var reason string
	if IsJoin(csr) {
		var err error
		if approve, reason, err = cfg.Joins.Decide(ctx, csr); err != nil {
			return err
		}
	} else {
		name := strings.TrimPrefix(csr.Spec.Username, "system:node:")
		node, err := cachedNode(name)
		if apierrors.IsNotFound(err) { // a node registered just now may not be cached yet
			node, err = cfg.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			node, err = nil, nil
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		approve, reason = Decide(csr, node, cfg.NodeSubnet)
	}
	if err := settle(ctx, cfg.Client, csr, approve, reason); err != nil {
		return err
	}
	klog.Infof("csr %s: approved %v: %s", csr.Name, approve, reason)
	return nil
}

func settle(ctx context.Context, client kubernetes.Interface, csr *certv1.CertificateSigningRequest, approve bool, reason string) error {
	csr = csr.DeepCopy()
	cond := certv1.CertificateSigningRequestCondition{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue,
		Reason: Reason, Message: reason, LastUpdateTime: metav1.Now()}
	if approve {
		cond.Type = certv1.CertificateApproved
	}
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	_, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	return err
}
