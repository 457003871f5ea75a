// Package csrapprover approves the certificates of kubelets after checking each requester is the
// node it claims to be: a joining or renewing node's client certificate (join.go) and every
// kubelet's serving certificate; kube-controller-manager approves none. A serving certificate
// names addresses, and a node that could name any address could pose as any kubelet to the
// apiserver (which verifies kubelet certificates, CIS 1.2.5). It runs on the apiserver machines, one leader at a time, with a cluster-level cache of
// nodes and CSRs.
package csrapprover

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/leader"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Reason is the condition reason the approver sets, approving or denying.
const Reason = "ClusterforgeNodeIdentity"

// allowedUsages are what a kubelet serving certificate may be used for.
var allowedUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth}

// Decide judges a kubelet-serving CSR against the Node object of its requester: the requester is
// the node (system:node:<name> in system:nodes), the request names that node and nothing else,
// asks to serve and no more, its one DNS name is the node's name (the instance's computer name,
// which its join proved) and its addresses are the node's own InternalIPs inside the node subnet.
// A node writes its own status, so a host name it lists there proves nothing: one listing a
// Service's name would serve that Service with a certificate every pod trusts. node is nil when
// no such Node exists.
func Decide(csr *certv1.CertificateSigningRequest, node *corev1.Node, nodeSubnets []netip.Prefix) (approve bool, reason string) {
	name, ok := strings.CutPrefix(csr.Spec.Username, pki.NodeUserPrefix)
	switch {
	case csr.Spec.SignerName != certv1.KubeletServingSignerName:
		return false, "not a kubelet serving certificate"
	case !ok || !slices.Contains(csr.Spec.Groups, pki.NodesGroup):
		return false, fmt.Sprintf("requested by %q, not a node", csr.Spec.Username)
	case node == nil || node.Name != name:
		return false, fmt.Sprintf("no Node %q", name)
	}
	req, reason := nodeRequest(csr, allowedUsages, certv1.UsageServerAuth)
	switch {
	case req == nil:
		return false, reason
	case req.Subject.CommonName != csr.Spec.Username:
		return false, fmt.Sprintf("subject %q is not the requester", req.Subject.CommonName)
	case len(req.EmailAddresses) > 0 || len(req.URIs) > 0:
		return false, "e-mail or URI names"
	case len(req.DNSNames) == 0 && len(req.IPAddresses) == 0:
		return false, "no names"
	}
	for _, dns := range req.DNSNames {
		if dns != name {
			return false, fmt.Sprintf("DNS name %q is not the node's", dns)
		}
	}
	for _, ip := range req.IPAddresses {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok || !slices.ContainsFunc(nodeSubnets, func(p netip.Prefix) bool { return p.Contains(addr.Unmap()) }) {
			return false, fmt.Sprintf("address %s is outside the node subnets %v", ip, nodeSubnets)
		}
		if !nodeHasAddress(node, corev1.NodeInternalIP, addr.Unmap().String()) {
			return false, fmt.Sprintf("address %s is not one of the node's", ip)
		}
	}
	return true, fmt.Sprintf("node %s serving %v %v", name, req.DNSNames, req.IPAddresses)
}

// OwnAddresses judges the addresses of a serving request Decide approved against its instance's
// own, as Resource Manager assigned them (Addresses): a node reports its InternalIPs itself, so
// one could list another worker's address and serve as that kubelet.
func OwnAddresses(csr *certv1.CertificateSigningRequest, instance []netip.Addr) (approve bool, reason string) {
	req, reason := nodeRequest(csr, allowedUsages, certv1.UsageServerAuth)
	if req == nil {
		return false, reason
	}
	for _, ip := range req.IPAddresses {
		addr, _ := netip.AddrFromSlice(ip)
		if !slices.Contains(instance, addr.Unmap()) {
			return false, fmt.Sprintf("address %s is not its instance's (Resource Manager gives it %v)", ip, instance)
		}
	}
	return true, ""
}

// nodeRequest reads a node's certificate request: usages among allowed, required among them, a
// self-signed PEM request for a subject in system:nodes; nil, and why, when it is not one.
func nodeRequest(csr *certv1.CertificateSigningRequest, allowed []certv1.KeyUsage, required certv1.KeyUsage) (*x509.CertificateRequest, string) {
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(allowed, u) {
			return nil, fmt.Sprintf("usage %q is not one of %q", u, allowed)
		}
	}
	if !slices.Contains(csr.Spec.Usages, required) {
		return nil, fmt.Sprintf("no %q usage", required)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, "the request is not a PEM certificate request"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Sprintf("unreadable request: %v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Sprintf("bad request signature: %v", err)
	}
	if !slices.Equal(req.Subject.Organization, []string{pki.NodesGroup}) {
		return nil, fmt.Sprintf("organization %q, want %s", req.Subject.Organization, pki.NodesGroup)
	}
	return req, ""
}

func nodeHasAddress(n *corev1.Node, kind corev1.NodeAddressType, value string) bool {
	return slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool { return a.Type == kind && a.Address == value })
}

// Config is what one approver needs.
type Config struct {
	Client kubernetes.Interface
	// NodeSubnets are the worker VNets' subnets, where every node's address lies.
	NodeSubnets []netip.Prefix
	// Joins judges joining nodes' client certificates; nil leaves them to others.
	Joins *Joins
	// Placement gives each worker's Node its placement labels and its instance's region and zone;
	// nil labels none.
	Placement Placement
	// Addresses tells a worker's own addresses, which its serving certificate may name; nil
	// leaves them to the node's own report.
	Addresses Addresses
	// Identity names this candidate in the leader election (the machine's name).
	Identity string
	// Lease is the leader election's lease in kube-system.
	Lease string
}

// Placement tells the labels of the worker a Node claims to be (WorkerInstances).
type Placement interface {
	Placement(ctx context.Context, providerID, name string) (map[string]string, error)
}

// Addresses tells the addresses of the worker a Node claims to be (WorkerInstances).
type Addresses interface {
	Addresses(ctx context.Context, providerID, name string) ([]netip.Addr, error)
}

// Run approves or denies pending kubelet serving CSRs and joining nodes' client CSRs, and labels
// new workers' Nodes, while this candidate leads, standing for election again each time it loses
// the lease, until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	return leader.Run(ctx, leader.Election{Client: cfg.Client, Namespace: metav1.NamespaceSystem, Lease: cfg.Lease,
		Identity: cfg.Identity, Logf: klog.Infof}, func(ctx context.Context) { lead(ctx, cfg) })
}

// lead watches nodes and CSRs through one shared cache and judges each pending CSR it owns, and
// labels each Node that has no pool label yet, one at a time from a queue; what it cannot settle
// yet (Resource Manager did not answer) is tried again with backoff.
func lead(ctx context.Context, cfg Config) {
	factory := informers.NewSharedInformerFactory(cfg.Client, 10*time.Minute)
	nodeInformer := factory.Core().V1().Nodes()
	nodeInformer.Informer()
	csrInformer := factory.Certificates().V1().CertificateSigningRequests()
	csrs := csrInformer.Informer()
	if err := csrs.AddIndexers(cache.Indexers{attestedIndex: attestedDocument}); err != nil {
		klog.Errorf("index CSRs: %v", err)
		return
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if cfg.Joins != nil {
		joins := *cfg.Joins
		joins.Carrying = func(contentKey string) []*certv1.CertificateSigningRequest {
			objs, _ := csrs.GetIndexer().ByIndex(attestedIndex, contentKey)
			var out []*certv1.CertificateSigningRequest
			for _, o := range objs {
				if csr, ok := o.(*certv1.CertificateSigningRequest); ok {
					out = append(out, csr)
				}
			}
			return out
		}
		joins.Alive = func(ctx context.Context, name string) (bool, error) { return nodeAlive(ctx, cfg.Client, name) }
		joins.Judged = &Judged{}
		cfg.Joins = &joins
	}
	// Requests are judged by requester in turn (each pool's join token is one, each node one);
	// a Node to label is a flow of its own.
	flowOf := func(key string) string {
		if name, ok := strings.CutPrefix(key, csrKey); ok {
			if csr, err := csrInformer.Lister().Get(name); err == nil {
				return csr.Spec.Username
			}
		}
		return key
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{
		DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
			Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Queue: newFairQueue(flowOf)}),
		}),
	})
	defer queue.ShutDown()
	enqueueCSR := func(obj any) {
		if csr, ok := obj.(*certv1.CertificateSigningRequest); ok && len(csr.Status.Conditions) == 0 && cfg.owns(csr) {
			queue.Add(csrKey + csr.Name)
		}
	}
	// A Node is looked up when it registers and when its provider ID is set, not on each status
	// update: a node naming an instance that is not its own is refused once per provider ID.
	enqueueNode := func(old, obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok || cfg.Placement == nil || n.Spec.ProviderID == "" || placed(n) {
			return
		}
		if o, ok := old.(*corev1.Node); ok && o.Spec.ProviderID == n.Spec.ProviderID {
			return
		}
		queue.Add(nodeKey + n.Name)
	}
	// Added after the caches synced: the pending CSRs and unlabelled Nodes arrive first, as adds.
	if _, err := csrs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueueCSR, UpdateFunc: func(_, obj any) { enqueueCSR(obj) }}); err != nil {
		klog.Errorf("watch CSRs: %v", err)
		return
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { enqueueNode(nil, obj) }, UpdateFunc: enqueueNode}); err != nil {
		klog.Errorf("watch Nodes: %v", err)
		return
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	// A few at a time: each may wait on Resource Manager, and a pool's join step brings thousands.
	var workers sync.WaitGroup
	for range judges {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for work(ctx, cfg, queue, csrInformer.Lister(), nodeInformer.Lister()) {
			}
		}()
	}
	workers.Wait()
}

// nodeAlive says whether the node named name renews its lease: its last renewal is within the
// lease's duration. A node that never registered, or whose lease is gone, is not alive.
func nodeAlive(ctx context.Context, client kubernetes.Interface, name string) (bool, error) {
	lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("node %s's lease: %w", name, err)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return false, nil
	}
	return time.Since(lease.Spec.RenewTime.Time) < time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second, nil
}

// placed says whether a Node carries the labels every worker gets (the GPU label is a GPU pool's
// alone, the zone a zonal instance's): a worker labelled before the gang domain or its region
// existed is labelled again, once.
func placed(n *corev1.Node) bool {
	return n.Labels[wellknown.PoolLabel] != "" && n.Labels[wellknown.GangDomainLabel] != "" && n.Labels[wellknown.RegionLabel] != ""
}

// judges is how many requests and Nodes are settled at once.
const judges = 4

// attestedIndex indexes join requests by what their attested documents say
// (attestation.ContentKey).
const attestedIndex = "attested-content"

func attestedDocument(obj any) ([]string, error) {
	csr, ok := obj.(*certv1.CertificateSigningRequest)
	if !ok || !isClientRequest(csr) {
		return nil, nil
	}
	var doc attestation.Document
	if json.Unmarshal([]byte(csr.Annotations[wellknown.AttestedDocumentAnnotation]), &doc) != nil {
		return nil, nil // no document: Decide refuses it
	}
	if key, err := attestation.ContentKey(doc); err == nil {
		return []string{key}, nil
	}
	return nil, nil
}

// work settles one queued CSR or Node; false once the queue is shut down.
func work(ctx context.Context, cfg Config, queue workqueue.TypedRateLimitingInterface[string], csrs certlisters.CertificateSigningRequestLister, nodes corelisters.NodeLister) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	var err error
	if name, ok := strings.CutPrefix(key, nodeKey); ok {
		var node *corev1.Node
		if node, err = nodes.Get(name); err == nil && !placed(node) {
			err = cfg.label(ctx, node)
		}
	} else {
		var csr *certv1.CertificateSigningRequest
		if csr, err = csrs.Get(strings.TrimPrefix(key, csrKey)); err == nil && len(csr.Status.Conditions) == 0 {
			err = cfg.judge(ctx, csr, nodes.Get)
		}
	}
	if err != nil && !apierrors.IsNotFound(err) {
		klog.Errorf("%s: %v (will retry)", key, err)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}

// The queue's keys: a CSR's name or a Node's, each behind its kind.
const (
	csrKey  = "csr/"
	nodeKey = "node/"
)

// label gives a worker's Node its labels. A Node that is not a worker's (another scale set,
// another computer name, a model the cluster did not write) stays unlabelled, so nothing placed by
// pool lands on it. A Node labelled before keeps its pool: its instance's scale set must agree.
func (cfg Config) label(ctx context.Context, node *corev1.Node) error {
	labels, err := cfg.Placement.Placement(ctx, node.Spec.ProviderID, node.Name)
	if pool := node.Labels[wellknown.PoolLabel]; err == nil && pool != "" && labels[wellknown.PoolLabel] != pool {
		err = fmt.Errorf("its scale set is pool %s's, its label pool %s's: %w", labels[wellknown.PoolLabel], pool, scaleset.ErrNotClusterInstance)
	}
	if errors.Is(err, scaleset.ErrNotClusterInstance) {
		klog.Warningf("node %s: not labelled: %v", node.Name, err)
		return nil
	}
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	if _, err := cfg.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	klog.Infof("node %s: labelled %v from its instance and its scale set", node.Name, labels)
	return nil
}

// owns says whether the request is one this approver judges.
func (cfg Config) owns(csr *certv1.CertificateSigningRequest) bool {
	return csr.Spec.SignerName == certv1.KubeletServingSignerName || (cfg.Joins != nil && isClientRequest(csr))
}

// judge decides one pending request and records the verdict.
func (cfg Config) judge(ctx context.Context, csr *certv1.CertificateSigningRequest, cachedNode func(string) (*corev1.Node, error)) error {
	var approve bool
	var reason string
	if isClientRequest(csr) {
		var err error
		if approve, reason, err = cfg.Joins.Decide(ctx, csr); err != nil {
			return err
		}
	} else {
		name := strings.TrimPrefix(csr.Spec.Username, pki.NodeUserPrefix)
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
		approve, reason = Decide(csr, node, cfg.NodeSubnets)
		if approve && cfg.Addresses != nil {
			addrs, err := cfg.Addresses.Addresses(ctx, node.Spec.ProviderID, node.Name)
			switch {
			case errors.Is(err, scaleset.ErrNotClusterInstance):
				approve, reason = false, err.Error()
			case err != nil:
				return err
			default:
				var own string
				if approve, own = OwnAddresses(csr, addrs); !approve {
					reason = own
				}
			}
		}
	}
	if err := settle(ctx, cfg.Client, csr, approve, reason); err != nil {
		return err
	}
	klog.Infof("csr %s: approved %v: %s", csr.Name, approve, reason)
	if isClientRequest(csr) && !approve {
		// A refused join or renewal request is removed at once: the join token (or a node) buys
		// requests, not room in etcd, however fast its holder writes them. The node reads the
		// removal as a refusal.
		uid := csr.UID
		err := cfg.Client.CertificatesV1().CertificateSigningRequests().Delete(ctx, csr.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.Errorf("csr %s: remove the refused request: %v", csr.Name, err)
		}
	}
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
