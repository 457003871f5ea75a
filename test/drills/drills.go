// Package drills holds the failure drills, each written once against machines.Fleet: they stop,
// wipe and start machines and check what the cluster does, on the process rehearsal and on
// booted machines alike. Tests call them: drills.WipedMemberRejoins(t, fleet).
package drills

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/ops/teams"

	clientv3 "go.etcd.io/etcd/client/v3"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
)

// WipedMemberRejoins: a main etcd machine crashes and comes back with an empty local disk, as
// after an Azure deallocation; its boot units remove and add it again, and it serves the
// cluster's data (L02).
func WipedMemberRejoins(t *testing.T, f machines.Fleet) {
	members := f.Of(spec.RoleEtcdMain)
	victim := members[len(members)-1]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli, err := f.EtcdClient(spec.RoleEtcdMain)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	before := MemberIDs(t, ctx, cli)
	if err := f.StopMachine(ctx, victim.Name, true); err != nil {
		t.Fatal(err)
	}
	if err := f.WipeLocalDisk(victim.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.StartMachine(ctx, victim.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitEtcdHealthy(ctx, spec.RoleEtcdMain); err != nil {
		t.Fatal(err)
	}
	after := MemberIDs(t, ctx, cli)
	if len(after) != len(members) {
		t.Fatalf("member list has %d members after the rejoin, want %d: %v", len(after), len(members), after)
	}
	if after[victim.Name] == 0 || after[victim.Name] == before[victim.Name] {
		t.Errorf("%s kept member id %x; a wiped member must be removed and added again", victim.Name, before[victim.Name])
	}
	log, err := f.UnitLog(ctx, victim.Name, "etcd-join.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"removed from cluster", "added to cluster"} {
		if !strings.Contains(log, want) {
			t.Errorf("etcd-join log lacks %q:\n%s", want, log)
		}
	}
	own, err := f.EtcdClient(spec.RoleEtcdMain, victim.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	err = WaitUntil(time.Minute, func() error {
		resp, err := own.Get(ctx, "/registry/namespaces/default", clientv3.WithSerializable())
		if err == nil && len(resp.Kvs) != 1 {
			err = fmt.Errorf("%d keys", len(resp.Kvs))
		}
		return err
	})
	if err != nil {
		t.Fatalf("the rejoined member does not serve the cluster's data: %v", err)
	}
}

// APIServerLoss: the apiserver machine whose controller-manager leads crashes; the load balancer
// routes around it, clients keep working, and the controller-manager and scheduler leases end
// up on survivors (L05).
func APIServerLoss(t *testing.T, f machines.Fleet) {
	ctx := context.Background()
	cs := Clientset(t, f)
	before := map[string]string{}
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		if err := WaitUntil(time.Minute, func() (err error) { before[lease], err = f.LeaseMachine(ctx, lease); return err }); err != nil {
			t.Fatal(err)
		}
	}
	victim := instance(t, f, spec.RoleAPIServer, before["kube-controller-manager"])
	t.Cleanup(func() { Restart(t, f, []machines.Instance{victim}, "") })
	if err := f.StopMachine(ctx, victim.Name, true); err != nil {
		t.Fatal(err)
	}
	backend := fmt.Sprintf("%s:%d", victim.IP, wellknown.APIServerPort)
	if err := WaitUntil(time.Minute, func() error { return LBHealthy(f, backend, false) }); err != nil {
		t.Fatalf("the load balancer kept %s in rotation: %v", backend, err)
	}
	for i := 0; i < 20; i++ {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("request %d through the load balancer after the failover: %v", i, err)
		}
	}
	for lease := range before {
		err := WaitUntil(90*time.Second, func() error {
			m, err := f.LeaseMachine(ctx, lease)
			if err == nil && m == victim.Name {
				err = fmt.Errorf("%s is still led from %s", lease, victim.Name)
			}
			return err
		})
		if err != nil {
			t.Error(err)
		}
	}
}

// EventsEtcdLoss: every events etcd machine crashes; core reads and writes keep working and the
// load balancer keeps every apiserver in rotation; events resume when the machines return (L03).
func EventsEtcdLoss(t *testing.T, f machines.Fleet) {
	ctx := context.Background()
	cs := Clientset(t, f)
	events := f.Of(spec.RoleEtcdEvents)
	t.Cleanup(func() { Restart(t, f, events, spec.RoleEtcdEvents) })
	for _, in := range events {
		if err := f.StopMachine(ctx, in.Name, true); err != nil {
			t.Fatal(err)
		}
	}
	// Long enough for the probe to take a failing backend out.
	time.Sleep(time.Duration(spec.APIServerProbeFailures+1) * spec.APIServerProbeIntervalSeconds * time.Second)
	for _, in := range f.Of(spec.RoleAPIServer) {
		if err := LBHealthy(f, fmt.Sprintf("%s:%d", in.IP, wellknown.APIServerPort), true); err != nil {
			t.Errorf("with the events etcd down: %v", err)
		}
		if code, body, _ := f.Get(ctx, fmt.Sprintf("https://%s:%d/readyz", in.IP, wellknown.APIServerPort)); code == http.StatusOK {
			t.Errorf("plain /readyz of %s is still 200 without the events etcd; the probe-path exclusion is untested: %s", in.Name, body)
		}
	}
	ns := Namespace(t, cs, "drill-events")
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "core-write"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("core write with the events etcd down: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "core-write", metav1.GetOptions{}); err != nil {
		t.Fatalf("core read with the events etcd down: %v", err)
	}
	// Stored in the main etcd by mistake, the event would be written at once.
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Events("default").Create(short, NewEvent("while-down"), metav1.CreateOptions{}); err == nil {
		t.Fatal("an event was stored while every events etcd member was down")
	}
	Restart(t, f, events, spec.RoleEtcdEvents)
	name := CreateEvent(t, ctx, cs, 90*time.Second)
	if keys := EtcdKeys(t, f, spec.RoleEtcdEvents, "/registry/events/default/"+name); len(keys) != 1 {
		t.Errorf("the event written after the outage is not in etcd-events")
	}
}

// Restart starts stopped machines again, as after a reboot, and waits until their role is healthy
// ("" for the apiservers).
func Restart(t *testing.T, f machines.Fleet, ins []machines.Instance, role string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(ins))
	for i, in := range ins {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f.StartMachine(ctx, in.Name) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if role == "" {
		err = f.WaitAPIHealthy(ctx)
	} else {
		err = f.WaitEtcdHealthy(ctx, role)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// WaitUntil calls check every half second until it succeeds or timeout passes.
func WaitUntil(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// WaitNode reads the node every half second until check accepts it or timeout passes.
func WaitNode(ctx context.Context, cs kubernetes.Interface, name string, timeout time.Duration, check func(*corev1.Node) error) error {
	return WaitUntil(timeout, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return check(n)
	})
}

// Clientset is the fleet's admin client.
func Clientset(t testing.TB, f machines.Fleet) *kubernetes.Clientset {
	t.Helper()
	cs, err := f.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Namespace creates a namespace for the test and deletes it after.
func Namespace(t *testing.T, cs *kubernetes.Clientset, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}) })
	return name
}

// TeamNamespace creates a namespace of team, labelled as operators label one (its team and the
// restricted Pod Security level), deleted when the test ends.
func TeamNamespace(t *testing.T, cs *kubernetes.Clientset, name, team string) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: addons.TeamNamespaceLabels(team)}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}) })
	return name
}

// TeamQuotaHeld waits until the team quota clusterforge-ops keeps in namespace ns is in force: the
// apiservers refuse every counted object while a quota's status is unknown.
func TeamQuotaHeld(t *testing.T, cs *kubernetes.Clientset, ns string) {
	t.Helper()
	if err := WaitUntil(2*time.Minute, func() error {
		q, err := cs.CoreV1().ResourceQuotas(ns).Get(context.Background(), teams.QuotaName, metav1.GetOptions{})
		if err == nil && len(q.Status.Hard) == 0 {
			err = fmt.Errorf("quota %s/%s has no status yet", ns, teams.QuotaName)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// RefusedBy is how the apiserver names an admission policy in the refusals it makes.
func RefusedBy(policy string) string { return "ValidatingAdmissionPolicy '" + policy + "'" }

// NewEvent is an event about the default namespace.
func NewEvent(name string) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Namespace", Name: "default", APIVersion: "v1"},
		Reason:         "RehearsalCheck", Message: "written by the rehearsal checks", Type: corev1.EventTypeNormal,
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "clusterforge-check"},
	}
}

// CreateEvent stores an event, retrying until timeout, and returns its name.
func CreateEvent(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, timeout time.Duration) string {
	t.Helper()
	name := "check-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := WaitUntil(timeout, func() error {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := cs.CoreV1().Events("default").Create(wctx, NewEvent(name), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatalf("create event: %v", err)
	}
	return name
}

// EtcdKeys lists the keys under prefix in one etcd cluster, read directly.
func EtcdKeys(t *testing.T, f machines.Fleet, role, prefix string) []string {
	t.Helper()
	cli, err := f.EtcdClient(role)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("%s: get %s: %v", role, prefix, err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}

// MemberIDs maps each etcd member's name to its id.
func MemberIDs(t *testing.T, ctx context.Context, cli *clientv3.Client) map[string]uint64 {
	t.Helper()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]uint64{}
	for _, m := range resp.Members {
		ids[m.Name] = m.ID
	}
	return ids
}

// LBHealthy says whether the load balancer has backend in rotation as wanted, or why not.
func LBHealthy(f machines.Fleet, backend string, want bool) error {
	got, err := f.LBBackendHealthy(backend)
	if err == nil && got != want {
		err = fmt.Errorf("load balancer has %s healthy=%v, want %v", backend, got, want)
	}
	return err
}

func instance(t *testing.T, f machines.Fleet, role, name string) machines.Instance {
	t.Helper()
	ins := f.Of(role)
	i := slices.IndexFunc(ins, func(in machines.Instance) bool { return in.Name == name })
	if i < 0 {
		t.Fatalf("no %s machine %s", role, name)
	}
	return ins[i]
}

// CSRVerdict watches a request from its creation until it is settled: its Approved, Denied or
// Failed condition, seen even when the approver removes the request at once (as it does with the
// join requests it refuses); gone is whether it was removed within 10 seconds of its verdict.
func CSRVerdict(ctx context.Context, cs kubernetes.Interface, csr *certv1.CertificateSigningRequest, timeout time.Duration) (verdict certv1.CertificateSigningRequestCondition, gone bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := cs.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + csr.Name, ResourceVersion: csr.ResourceVersion})
	if err != nil {
		return verdict, false, err
	}
	defer w.Stop()
	var settled <-chan time.Time
	for {
		select {
		case <-settled:
			return verdict, false, nil
		case event, open := <-w.ResultChan():
			if !open {
				if verdict.Type == "" {
					return verdict, false, fmt.Errorf("request %s: no verdict within %s", csr.Name, timeout)
				}
				return verdict, false, nil
			}
			got, ok := event.Object.(*certv1.CertificateSigningRequest)
			if !ok || got.UID != csr.UID {
				continue
			}
			if len(got.Status.Conditions) > 0 && verdict.Type == "" {
				verdict, settled = got.Status.Conditions[0], time.After(10*time.Second)
			}
			if event.Type == watch.Deleted {
				return verdict, true, nil
			}
		}
	}
}
