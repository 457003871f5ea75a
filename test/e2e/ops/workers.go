package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/ops/maintenance"
	"github.com/clusterforge/clusterforge/components/ops/teams"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines/nspawn"
	"github.com/clusterforge/clusterforge/test/podsecurity"
)

// The operations layer runs from the worker image's preloaded clusterforge-ops image: the
// apiservers call its webhook at its pod's address over TLS its own authority signs (a team pod gets
// its toleration), and a reboot the metadata stand-in schedules for a worker makes that worker's
// agent set MaintenanceScheduled, the leading controller cordon and drain it, the agent start the
// reboot early once the worker is drained, and the controller uncordon it once the event is gone
// (L17, L37).
func OperationsLayerRunsOnTheWorkers(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cs := drills.Clientset(t, framework.Booted)

	ns := drills.TeamNamespace(t, cs, "drill-ops-team", "research")
	drills.TeamQuotaHeld(t, cs, ns)
	pod := podsecurity.Restricted(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Image: framework.Booted.Cluster.Versions.PauseImage}}}})
	want := teams.Tolerations("research", false)[0]
	if err := drills.WaitUntil(time.Minute, func() error {
		created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && !slices.Contains(created.Spec.Tolerations, want) {
			err = fmt.Errorf("tolerations %v: the webhook was not called", created.Spec.Tolerations)
		}
		return err
	}); err != nil {
		t.Fatalf("the team webhook in clusterforge-ops: %v", err)
	}

	var worker, address string
	for _, m := range framework.Booted.Machines {
		if m.Image == machine.ImageWorker {
			worker, address = m.Name, m.Address
			break
		}
	}
	// expect waits for the worker's MaintenanceScheduled status, a message containing message, and
	// a cordon by the controller or none. The drain it may wait for evicts with grace periods, on a
	// host that runs other packages' tests beside this one.
	began := time.Now()
	expect := func(what string, status corev1.ConditionStatus, message string, cordoned bool) {
		t.Helper()
		defer func() { t.Logf("%s: %s into the drill", what, time.Since(began).Round(time.Second)) }()
		if err := drills.WaitNode(ctx, cs, worker, 3*time.Minute, func(node *corev1.Node) error {
			c, _ := nodestatus.Condition(node, maintenance.Condition)
			if c.Status != status || !strings.Contains(c.Message, message) || node.Spec.Unschedulable != cordoned ||
				(node.Annotations[wellknown.EvacuateAnnotation] != "") != cordoned {
				return fmt.Errorf("%s=%q %q, unschedulable %v", c.Type, c.Status, c.Message, node.Spec.Unschedulable)
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %s: %v\n%s", what, worker, err, opsDiagnosis(cs, worker))
		}
	}
	expect("no event yet", corev1.ConditionFalse, "", false)

	events := map[string]maintenance.Document{address: {DocumentIncarnation: 1, Events: []maintenance.Event{{
		EventID: "drill-reboot", EventType: "Reboot", ResourceType: "VirtualMachine", Resources: []string{worker},
		EventStatus: "Scheduled", NotBefore: time.Now().Add(15 * time.Minute).UTC().Format(time.RFC1123), EventSource: "Platform"}}}}
	data, err := json.Marshal(events)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(framework.Booted.ScheduledEventsFile(), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(framework.Booted.ScheduledEventsFile()) })
	expect("a reboot scheduled", corev1.ConditionTrue, "(event drill-reboot", true)
	// The agent starts the reboot early once the controller has drained the worker.
	expect("the worker drained", corev1.ConditionTrue, "Reboot started (event drill-reboot", true)
	if err := os.Remove(framework.Booted.ScheduledEventsFile()); err != nil {
		t.Fatal(err)
	}
	expect("the reboot done", corev1.ConditionFalse, "", false)
	// What the drain evicted comes back on the uncordoned worker before the next check.
	if err := framework.Booted.WaitAddons(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the add-ons back: %s into the drill", time.Since(began).Round(time.Second))
}

// opsDiagnosis is what a failed maintenance drill needs to be read: the node's annotations, the pods
// still on it, and the end of the logs of the clusterforge-ops controllers and of the node's agent.
func opsDiagnosis(cs kubernetes.Interface, node string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	if n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&out, "  annotations: %v\n", n.Annotations)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return out.String() + "  pods: " + err.Error()
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node {
			fmt.Fprintf(&out, "  on %s: %s/%s %s deleting since %v\n", node, p.Namespace, p.Name, p.Status.Phase, p.DeletionTimestamp)
		}
		agent := strings.HasPrefix(p.Name, addons.OpsAgentName+"-") && p.Spec.NodeName == node
		controller := strings.HasPrefix(p.Name, wellknown.OpsName+"-") && !strings.HasPrefix(p.Name, addons.OpsAgentName)
		if p.Namespace != addons.SystemNamespace || (!agent && !controller) {
			continue
		}
		logs, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: framework.Ptr(int64(25))}).DoRaw(ctx)
		if err != nil {
			logs = []byte(err.Error())
		}
		fmt.Fprintf(&out, "  %s on %s:\n    %s\n", p.Name, p.Spec.NodeName, strings.ReplaceAll(strings.TrimSpace(string(logs)), "\n", "\n    "))
	}
	return out.String()
}

// node-problem-detector runs on every worker from the preloaded image and reports only its own
// node: a hung containerd in one worker's kernel log makes that node KernelDeadlock=True and no
// other; its log emptied and its agent restarted, the node is healthy again before remediation's
// grace runs out (L35).
func NodeProblemDetectorReportsItsOwnNode(t *testing.T) {
	framework.NeedBoot(t)
	ctx := context.Background() // the cleanup needs it too; every wait below is bounded
	cs := drills.Clientset(t, framework.Booted)
	var workers []*nspawn.Machine
	for _, in := range framework.Booted.Machines {
		if in.Image == machine.ImageWorker {
			m, err := framework.Booted.Machine(in.Name)
			if err != nil {
				t.Fatal(err)
			}
			workers = append(workers, m)
		}
	}
	if len(workers) < 2 {
		t.Fatalf("%d workers: the drill needs two", len(workers))
	}
	sick, healthy := workers[0], workers[1]
	expect := func(node string, status corev1.ConditionStatus, reason string) {
		t.Helper()
		if err := drills.WaitNode(ctx, cs, node, 2*time.Minute, func(n *corev1.Node) error {
			c, ok := nodestatus.Condition(n, wellknown.KernelDeadlockCondition)
			if !ok {
				return fmt.Errorf("no %s condition yet", c.Type)
			}
			if c.Status != status || c.Reason != reason {
				return fmt.Errorf("%s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
	}
	for _, m := range workers {
		expect(m.Name, corev1.ConditionFalse, "KernelHasNoDeadlock")
	}

	log := filepath.Join(sick.Root, nspawn.KernelLog)
	t.Cleanup(func() {
		// An empty log and a new agent: the node's conditions start healthy again.
		if err := os.WriteFile(log, nil, 0o644); err != nil {
			t.Error(err)
		}
		if err := cs.CoreV1().Pods(addons.SystemNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
			LabelSelector: "app=" + addons.NodeProblemDetectorName, FieldSelector: "spec.nodeName=" + sick.Name}); err != nil {
			t.Error(err)
		}
		expect(sick.Name, corev1.ConditionFalse, "KernelHasNoDeadlock")
	})
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(f, "%s kernel: INFO: task containerd:4242 blocked for more than 120 seconds.\n", time.Now().UTC().Format(time.RFC3339Nano))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	expect(sick.Name, corev1.ConditionTrue, "ContainerdHung")
	expect(healthy.Name, corev1.ConditionFalse, "KernelHasNoDeadlock")
}

// A node agent's token names the node its pod runs on, and the admission policy holds the agent
// to that Node: with the token of the clusterforge-ops agent on one worker, that worker's Node
// may be updated and its status patched, the other worker's may not (RBAC alone would allow both).
func NodeAgentsChangeOnlyTheirOwnNode(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := drills.Clientset(t, framework.Booted)
	workers := framework.WorkerNames()
	own, other := workers[0], workers[1]
	pods, err := cs.CoreV1().Pods(addons.SystemNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app=" + addons.OpsAgentName, FieldSelector: "spec.nodeName=" + own})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the agent pod on %s: %d pods, %v", own, len(pods.Items), err)
	}
	pod := pods.Items[0]
	token, err := cs.CoreV1().ServiceAccounts(addons.SystemNamespace).CreateToken(ctx, addons.OpsAgentName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: framework.Ptr(int64(600)),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := framework.Booted.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.AnonymousClientConfig(cfg)
	cfg.BearerToken = token.Status.Token
	agent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	change := func(node string) (update, patchStatus error) {
		n, err := agent.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the agent reads %s: %v", node, err)
		}
		_, update = agent.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		_, patchStatus = agent.CoreV1().Nodes().PatchStatus(ctx, node, []byte(`{"status":{}}`))
		return update, patchStatus
	}
	if update, patch := change(own); update != nil || patch != nil {
		t.Errorf("the agent on %s changing its own Node: update %v, status patch %v", own, update, patch)
	}
	update, patch := change(other)
	for what, err := range map[string]error{"update": update, "status patch": patch} {
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), addons.NodeAgentsOwnNodePolicy) {
			t.Errorf("the agent on %s, %s of %s: %v; want the policy's refusal", own, what, other, err)
		}
	}
}
