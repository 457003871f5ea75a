package ops

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"

	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/ops/maintenance"
	"github.com/clusterforge/clusterforge/components/ops/remediation"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/standin/imds"
)

// A planned reboot (L37) on the rehearsal's apiservers: the metadata stand-in announces an Azure
// Scheduled Event for the node's VM; the node's watcher turns it into the MaintenanceScheduled
// condition, the remediation controller cordons and drains the node ahead of the reboot, and
// uncordons it when the event is gone. The machine is never removed.
func ScheduledRebootDrainsTheNodeAhead(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := framework.Clientset(t)
	const pool, vm = "drill-maint", "cf-dev-cpu_7"
	ns := drills.Namespace(t, cs, "drill-maintenance")
	node := drillNodes(t, cs, pool, 1)[0]
	if err := drills.WaitUntil(time.Minute, func() error { return readyNodes(ctx, cs, []string{node}) }); err != nil {
		t.Fatal(err)
	}
	work := teamPod("work", pool, "")
	work.Spec.NodeName = node
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, work, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var planned atomic.Pointer[maintenance.Document]
	planned.Store(&maintenance.Document{})
	standIn := &imds.Server{Machines: map[string]imds.InstanceMetadata{"127.0.0.1": {Name: vm}},
		ScheduledEvents: func(string) (maintenance.Document, error) { return *planned.Load(), nil }}
	imds := httptest.NewServer(standIn)
	defer imds.Close()
	watcher := &maintenance.Watcher{Client: cs, NodeName: node, VMName: vm, Endpoint: imds.URL, HTTP: imds.Client(), Every: time.Second,
		DrainedReadEvery: time.Second, Logf: t.Logf}

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = wellknown.PoolLabel + "=" + pool }))
	nodeInformer := factory.Core().V1().Nodes().Informer()
	machines := &recordedRemovals{}
	controller := &remediation.Controller{Client: cs, Policy: remediation.DefaultPolicy(), Machines: machines, Logf: t.Logf}
	factory.Start(ctx.Done())
	done := make(chan error, 2)
	go func() { done <- controller.Run(ctx, nodeInformer) }()
	go func() { done <- watcher.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		<-done
	}()

	state := func() (*corev1.Node, corev1.ConditionStatus, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return nil, "", err
		}
		c, _ := nodestatus.Condition(n, maintenance.Condition)
		return n, c.Status, nil
	}
	if err := drills.WaitUntil(30*time.Second, func() error {
		n, status, err := state()
		if err == nil && (status != corev1.ConditionFalse || n.Spec.Unschedulable) {
			err = fmt.Errorf("%s=%q, unschedulable %v", maintenance.Condition, status, n.Spec.Unschedulable)
		}
		return err
	}); err != nil {
		t.Fatalf("before any event: %v", err)
	}

	// The node's own reboot, and one its VM shares with another: starting that would reboot the
	// other VM undrained.
	notBefore := time.Now().Add(10 * time.Minute).UTC().Format(time.RFC1123)
	planned.Store(&maintenance.Document{DocumentIncarnation: 1, Events: []maintenance.Event{
		{EventID: "drill-1", EventType: "Reboot", ResourceType: "VirtualMachine", Resources: []string{vm}, EventStatus: "Scheduled",
			NotBefore: notBefore, EventSource: "Platform"},
		{EventID: "drill-shared", EventType: "Reboot", ResourceType: "VirtualMachine", Resources: []string{vm, "cf-dev-cpu_8"},
			EventStatus: "Scheduled", NotBefore: notBefore, EventSource: "Platform"}}})
	var drainedAt time.Time
	if err := drills.WaitUntil(time.Minute, func() error {
		n, status, err := state()
		if err != nil {
			return err
		}
		_, err = cs.CoreV1().Pods(ns).Get(ctx, work.Name, metav1.GetOptions{})
		if status != corev1.ConditionTrue || !n.Spec.Unschedulable || n.Annotations[wellknown.EvacuateAnnotation] == "" || !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s=%q, unschedulable %v, the work pod: %v", maintenance.Condition, status, n.Spec.Unschedulable, err)
		}
		drainedAt, err = time.Parse(time.RFC3339, n.Annotations[wellknown.DrainedAnnotation])
		return err
	}); err != nil {
		t.Fatalf("a reboot planned at %s: %v", notBefore, err)
	}
	// The watcher starts the node's own reboot once the node is drained, and the node's condition
	// says so; the shared one waits for its time.
	if err := drills.WaitUntil(90*time.Second, func() error {
		n, _, err := state()
		if err != nil {
			return err
		}
		_, ok := standIn.Started()["drill-1"]
		if c, _ := nodestatus.Condition(n, maintenance.Condition); !ok || !strings.Contains(c.Message, "Reboot started (event drill-1") {
			return fmt.Errorf("not started: %v, %s", standIn.Started(), c.Message)
		}
		return nil
	}); err != nil {
		t.Fatalf("after the drain: %v", err)
	}
	started := standIn.Started()
	if startedAt := started["drill-1"]; startedAt.Before(drainedAt) {
		t.Errorf("the reboot started at %s, before the drain ended at %s", startedAt, drainedAt)
	}
	if _, ok := started["drill-shared"]; ok {
		t.Errorf("the event shared with another VM was started: %v", started)
	}

	planned.Store(&maintenance.Document{DocumentIncarnation: 2}) // the reboot happened
	if err := drills.WaitUntil(time.Minute, func() error {
		n, status, err := state()
		if err == nil && (status != corev1.ConditionFalse || n.Spec.Unschedulable || n.Annotations[wellknown.EvacuateAnnotation] != "" ||
			n.Annotations[wellknown.DrainedAnnotation] != "") {
			err = fmt.Errorf("%s=%q, unschedulable %v", maintenance.Condition, status, n.Spec.Unschedulable)
		}
		return err
	}); err != nil {
		t.Fatalf("after the reboot: %v", err)
	}
	if removed := machines.names(); len(removed) != 0 {
		t.Errorf("maintenance removed machines %v", removed)
	}
}
