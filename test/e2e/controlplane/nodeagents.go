package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// checkNodeAgentFields asks the real apiservers, as each node agent's service account with its
// pod's node in the token (impersonated), what the agent may change on its own Node: its own
// conditions, and for the clusterforge-ops agent taking the preflight taint off; never a label, an
// annotation, another taint, the cordon or another agent's condition. And as the node itself: its
// kubelet's own labels, never the pool's, no pod, no name but its own among its addresses and no
// registration without its pool's taints (the add-ons' admission policies). Requests are dry runs; the preflight taint is put on the node for
// real, then taken off.
func checkNodeAgentFields(t *testing.T, cs *kubernetes.Clientset) {
	ctx := context.Background()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %d, %v", len(nodes.Items), err)
	}
	node := nodes.Items[0].Name
	preflight := corev1.Taint{Key: wellknown.PreflightTaint, Value: wellknown.PreflightPending, Effect: corev1.TaintEffectNoSchedule}
	// update changes the Node as it is now, as client, made again when KWOK's heartbeat wrote first.
	update := func(client *kubernetes.Clientset, opts metav1.UpdateOptions, edit func(*corev1.Node)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			edit(n)
			_, err = client.CoreV1().Nodes().Update(ctx, n, opts)
			return err
		})
	}
	setTaints := func(edit func([]corev1.Taint) []corev1.Taint) {
		t.Helper()
		if err := update(cs, metav1.UpdateOptions{}, func(n *corev1.Node) { n.Spec.Taints = edit(n.Spec.Taints) }); err != nil {
			t.Fatal(err)
		}
	}
	withoutPreflight := func(ts []corev1.Taint) []corev1.Taint {
		var out []corev1.Taint
		for _, taint := range ts {
			if taint.Key != wellknown.PreflightTaint {
				out = append(out, taint)
			}
		}
		return out
	}
	setTaints(func(ts []corev1.Taint) []corev1.Taint { return append(withoutPreflight(ts), preflight) })
	t.Cleanup(func() { setTaints(withoutPreflight) })

	as := func(impersonate rest.ImpersonationConfig) *kubernetes.Clientset { return framework.As(t, impersonate) }
	agent := func(name string) *kubernetes.Clientset {
		onNode := framework.ServiceAccount(addons.SystemNamespace, name)
		onNode.Extra = map[string][]string{addons.NodeNameExtra: {node}}
		return as(onNode)
	}
	opsAgent, npd := agent(addons.OpsAgentName), agent(addons.NodeProblemDetectorName)
	kubelet := as(rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{pki.NodesGroup, "system:authenticated"}})
	dryRun := []string{metav1.DryRunAll}
	change := func(client *kubernetes.Clientset, edit func(*corev1.Node)) func() error {
		return func() error { return update(client, metav1.UpdateOptions{DryRun: dryRun}, edit) }
	}
	condition := func(client *kubernetes.Clientset, kind string) error {
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: corev1.NodeConditionType(kind), Status: corev1.ConditionTrue, Reason: "Drill", LastTransitionTime: metav1.Now()}}}})
		_, err := client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{DryRun: dryRun}, "status")
		return err
	}
	cases := []nodeChange{
		{"the ops agent takes the preflight taint off", change(opsAgent, func(n *corev1.Node) { n.Spec.Taints = withoutPreflight(n.Spec.Taints) }), "", ""},
		{"the ops agent sets its preflight condition", func() error { return condition(opsAgent, wellknown.PreflightFailedCondition) }, "", ""},
		{"the ops agent sets its maintenance condition", func() error { return condition(opsAgent, wellknown.MaintenanceScheduledCondition) }, "", ""},
		{"node-problem-detector sets a kernel condition", func() error { return condition(npd, wellknown.KernelDeadlockCondition) }, "", ""},
		{"the ops agent moves its node to another pool", change(opsAgent, func(n *corev1.Node) { n.Labels[wellknown.PoolLabel] = "system" }), "labels", ""},
		{"the ops agent marks its node for replacement", change(opsAgent, func(n *corev1.Node) {
			n.Annotations = map[string]string{wellknown.ReasonAnnotation: "drill"}
		}), "annotations", ""},
		{"the ops agent holds its node's deletion with a finalizer", change(opsAgent, func(n *corev1.Node) {
			n.Finalizers = append(n.Finalizers, "example.com/hold")
		}), "finalizers or owners", ""},
		{"the ops agent cordons its node", change(opsAgent, func(n *corev1.Node) { n.Spec.Unschedulable = true }), "cordon or uncordon", ""},
		{"the ops agent gives its node to a team", change(opsAgent, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: wellknown.TeamKey, Value: "drill", Effect: corev1.TaintEffectNoSchedule})
		}), "taints", ""},
		{"the ops agent swaps the preflight taint for a team's", change(opsAgent, func(n *corev1.Node) {
			n.Spec.Taints = append(withoutPreflight(n.Spec.Taints), corev1.Taint{Key: wellknown.TeamKey, Value: "drill", Effect: corev1.TaintEffectNoSchedule})
		}), "taints", ""},
		{"the ops agent marks its node not ready", func() error { return condition(opsAgent, string(corev1.NodeReady)) }, "conditions", ""},
		{"the ops agent sets node-problem-detector's condition", func() error { return condition(opsAgent, wellknown.GPUProblemCondition) }, "conditions", ""},
		{"node-problem-detector clears a failed preflight", func() error { return condition(npd, wellknown.PreflightFailedCondition) }, "conditions", ""},
		// The controllers that may update any Node change only what each owns.
		{"cluster-autoscaler moves a node to another pool", change(as(framework.ServiceAccount(addons.SystemNamespace, addons.AutoscalerName)), func(n *corev1.Node) {
			n.Labels[wellknown.PoolLabel] = "system"
		}), "may not change a Node's labels", addons.NodeControllersPolicy},
		{"clusterforge-ops takes every taint off a node", change(as(framework.ServiceAccount(addons.SystemNamespace, wellknown.OpsName)), func(n *corev1.Node) {
			n.Spec.Taints = nil
		}), "only its own taints", addons.NodeControllersPolicy},
		{"the kubelet updates a label of its own", change(kubelet, func(n *corev1.Node) { n.Labels[corev1.LabelInstanceTypeStable] = "Standard_Drill" }), "", ""},
		// The placement labels are the CSR approver's: NodeRestriction refuses them to any kubelet.
		{"the kubelet moves its node to another pool", change(kubelet, func(n *corev1.Node) { n.Labels[wellknown.PoolLabel] = "system" }), "is not allowed to modify labels: " + wellknown.PoolLabel, nodeRestriction},
		{"the kubelet adds a label a pool could place pods by", change(kubelet, func(n *corev1.Node) { n.Labels["example.com/accelerator"] = "a100" }), "after it registers", addons.NodeLabelsPolicy},
		// NodeRestriction lets a kubelet set its zone; the approver set it from its instance.
		{"the kubelet moves its node to another zone", change(kubelet, func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "elsewhere-9" }), "region or zone", addons.NodeLabelsPolicy},
		// A mirror pod with clusterforge-ops's labels would make the node an endpoint of its webhooks.
		{"the kubelet creates a mirror pod among clusterforge-ops's endpoints", func() error {
			ops, err := cs.AppsV1().Deployments(addons.SystemNamespace).Get(ctx, wellknown.OpsName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			// Owned by its node, as NodeRestriction requires of a mirror pod.
			mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "drill-mirror-" + node, Labels: ops.Spec.Selector.MatchLabels,
				Annotations:     map[string]string{corev1.MirrorPodAnnotationKey: "drill"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID, Controller: framework.Ptr(true)}}},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "drill"}}}}
			_, err = kubelet.CoreV1().Pods(addons.SystemNamespace).Create(ctx, mirror, metav1.CreateOptions{DryRun: dryRun})
			return err
		}, "creates no pods", addons.NodePodsPolicy},
		{"the kubelet lists a Service's name among its addresses", func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: wellknown.OpsName + ".kube-system.svc"})
				_, err = kubelet.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{DryRun: dryRun})
				return err
			})
		}, "only name among its addresses is its own", addons.NodeAddressesPolicy},
		// NodeRestriction lets a kubelet register its own Node with any taints; the policy holds it to
		// its pool's. (On the booted cluster the first node is the system pool's, tainted; the
		// rehearsal's simulated nodes carry no instance's computer name, which is refused first.)
		{"the kubelet registers its node without its pool's taints", func() error {
			fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{corev1.LabelHostname: node}}}
			_, err := kubelet.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{DryRun: dryRun})
			return err
		}, "a node registers", addons.NodeRegistrationPolicy},
	}
	check := func(tc nodeChange) error {
		err := tc.change()
		if tc.refusal == "" {
			return err
		}
		by := drills.RefusedBy(addons.NodeAgentsOwnNodePolicy)
		switch tc.by {
		case "":
		case nodeRestriction:
			by = "is forbidden"
		default:
			by = drills.RefusedBy(tc.by)
		}
		if err == nil || !strings.Contains(err.Error(), by) || !strings.Contains(err.Error(), tc.refusal) {
			return fmt.Errorf("%v, want the refusal of %s saying %q", err, by, tc.refusal)
		}
		return nil
	}
	// A policy takes effect once each apiserver has loaded it: wait until both refuse several
	// requests in a row, which the load balancer spreads over the apiservers; then try each once.
	if err := drills.WaitUntil(time.Minute, func() error {
		for range 6 {
			for _, tc := range cases {
				if tc.refusal != "" {
					if err := check(tc); err != nil {
						return fmt.Errorf("%s: %w", tc.what, err)
					}
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if err := check(tc); err != nil {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
}

// nodeChange is a change to a Node as one of its agents or as the node, and the refusal expected
// ("" when admitted): a part of the message, and whose policy (the kubelet's or the agents').
type nodeChange struct {
	what    string
	change  func() error
	refusal string
	// by is what refuses it: the node agents' policy when empty, else NodeRestriction or a policy's name.
	by string
}

// nodeRestriction names the NodeRestriction admission plugin among nodeChange's refusers.
const nodeRestriction = "NodeRestriction"
