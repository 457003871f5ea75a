package processes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
)

// startLB starts the load balancer on the apiserver address, in front of every apiserver machine,
// probing as the Azure program configures it.
func (r *Rehearsal) startLB() error {
	var backends []string
	for _, in := range r.Of(spec.RoleAPIServer) {
		backends = append(backends, fmt.Sprintf("%s:%d", in.IP, wellknown.APIServerPort))
	}
	argv := append(append([]string(nil), r.Self...), "lb",
		"--listen="+fmt.Sprintf("%s:%d", r.Cluster.Network.APIServerIP, wellknown.APIServerPort),
		"--backends="+strings.Join(backends, ","),
		"--probe-path="+spec.APIServerProbePath,
		"--interval="+(spec.APIServerProbeIntervalSeconds*time.Second).String(),
		"--failures="+strconv.Itoa(spec.APIServerProbeFailures),
		"--state="+r.LBStateFile(),
	)
	proc, err := machines.StartProcess(argv, os.Environ(), r.Dir, filepath.Join(r.Dir, "logs", "lb.log"))
	if err != nil {
		return err
	}
	proc.Role, proc.Machine, proc.Name = "load-balancer", "lb", "lb"
	proc.URL = r.Cluster.APIServerURL()
	proc.CA, proc.Cert, proc.Key = r.PKIFile(pki.ClusterCA, "crt"), r.PKIFile(pki.Admin, "crt"), r.PKIFile(pki.Admin, "key")
	return r.track(proc)
}

// kwokConfig lets KWOK renew leases, play node and pod stages and take up the pods of new nodes
// in parallel, as thousands of kubelets do on their own: its defaults (4 at a time, and one node's
// pods at a time) fall behind a lease every 10 s past a few thousand nodes and take minutes to
// start the pods of a few hundred new ones, for want of KWOK, not of the control plane.
const kwokConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: 64
  nodePlayStageParallelism: 16
  podPlayStageParallelism: 16
  podsOnNodeSyncParallelism: 16
`

// kwokAccess is KWOK's role and its binding: the nodes it registers and heartbeats, their
// leases, the pods bound to them and their events.
func kwokAccess() []addons.Object {
	return userAccess(machines.KWOKUser,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status", "pods/status"}, Verbs: []string{"update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	)
}

// userAccess is a ClusterRole of rules, named as the user it is bound to.
func userAccess(user string, rules ...rbacv1.PolicyRule) []addons.Object {
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      rules,
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	return []addons.Object{role, binding}
}

// whileForbidden retries call while it is refused for 30 s at most: RBAC applied just now reaches
// each apiserver's authorizer through that apiserver's own watch, and the load balancer may send
// the call to one that has not seen it yet.
func whileForbidden(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := call()
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// startNodes starts KWOK and registers the simulated nodes, waiting until they are Ready.
func (r *Rehearsal) startNodes(ctx context.Context) error {
	nodes, err := r.Nodes()
	if err != nil {
		return err
	}
	if err := r.Apply(ctx, kwokAccess()...); err != nil {
		return err
	}
	kubeconfig := filepath.Join(r.Dir, "kwok.kubeconfig")
	if err := r.WriteKubeconfigAs(kubeconfig, machines.KWOKUser, pki.NodesGroup); err != nil {
		return err
	}
	config := filepath.Join(r.Dir, "kwok.yaml")
	if err := machines.WriteFile(config, kwokConfig, 0o644); err != nil {
		return err
	}
	argv := []string{filepath.Join(r.Tools, "kwok"),
		"--kubeconfig=" + kubeconfig, "--config=" + config, "--v=WARN",
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + machines.KWOKAnnotation + "=fake",
		// Heartbeats through node leases, renewed every 10 s as a kubelet does: without them
		// KWOK's status heartbeats come about a minute apart, past the node controller's grace,
		// and every node flaps NotReady, which marks its pods unready for good.
		"--node-lease-duration-seconds=40",
		"--cidr=" + r.Cluster.Network.NodeSubnet,
	}
	proc, err := machines.StartProcess(argv, os.Environ(), r.Dir, filepath.Join(r.Dir, "logs", "kwok.log"))
	if err != nil {
		return err
	}
	proc.Role, proc.Machine, proc.Name = "workers", "kwok", "kwok"
	if err := r.track(proc); err != nil {
		return err
	}
	cfg, err := r.KWOKRESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		err := whileForbidden(ctx, func() error {
			_, err := cs.CoreV1().Nodes().Create(ctx, &n, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("register node %s: %w", n.Name, err)
		}
	}
	r.logf("registered %d KWOK nodes over %d pools", len(nodes), len(r.Cluster.Pools))
	return machines.Poll(ctx, time.Minute, "KWOK nodes", func(ctx context.Context) error {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range list.Items {
			if schedulable(n) {
				ready++
			}
		}
		if ready < len(nodes) {
			return fmt.Errorf("%d of %d nodes Ready and untainted by the node controller", ready, len(nodes))
		}
		return nil
	})
}

// schedulable: Ready, and the node controller has lifted its not-ready taint.
func schedulable(n corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	return nodestatus.IsReady(&n)
}
