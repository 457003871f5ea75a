package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/processes"
)

// Check 1: the API answers through the load balancer and lists the simulated pools.
func APIThroughLoadBalancerListsPools(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	code, body, err := framework.Running.Get(ctx, framework.Running.Cluster.APIServerURL()+spec.APIServerProbePath)
	if err != nil || code != http.StatusOK {
		t.Fatalf("load balancer %s: HTTP %d %v %s", framework.Running.Cluster.APIServerURL(), code, err, body)
	}
	out, err := exec.Command(filepath.Join(framework.Running.Tools, "kubectl"), "--kubeconfig", framework.Running.Kubeconfig(),
		"get", "nodes", "--no-headers", "-L", wellknown.PoolLabel).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get nodes: %v\n%s", err, out)
	}
	want, err := framework.Running.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	perPool := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[1] != "Ready" {
			t.Errorf("node not Ready: %q", line)
			continue
		}
		perPool[fields[len(fields)-1]]++
	}
	for _, pool := range framework.Running.Cluster.Pools {
		if n := min(pool.MaxNodes, framework.NodesPerPool()); perPool[pool.Name] != n {
			t.Errorf("kubectl get nodes shows %d nodes of pool %s, want %d:\n%s", perPool[pool.Name], pool.Name, n, out)
		}
	}
	cs := framework.Clientset(t)
	for _, w := range want {
		got, err := cs.CoreV1().Nodes().Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range w.Labels {
			if got.Labels[k] != v {
				t.Errorf("node %s label %s = %q, want %q", w.Name, k, got.Labels[k], v)
			}
		}
		var taints []corev1.Taint
		for _, taint := range got.Spec.Taints {
			if !strings.HasPrefix(taint.Key, "node.kubernetes.io/") { // set by the node controller
				taints = append(taints, taint)
			}
		}
		if len(taints) != len(w.Spec.Taints) {
			t.Errorf("node %s taints %v, want %v", w.Name, got.Spec.Taints, w.Spec.Taints)
		}
		for name, q := range w.Status.Capacity {
			if c := got.Status.Capacity[name]; c.Cmp(q) != 0 {
				t.Errorf("node %s capacity %s = %s, want %s", w.Name, name, c.String(), q.String())
			}
		}
	}
}

// Check 2: Events live only in the events etcd (L03). On either fixture.
func EventsOnlyInEventsEtcd(t *testing.T, f machines.Fleet) {
	ctx := context.Background()
	name := drills.CreateEvent(t, ctx, drills.Clientset(t, f), 30*time.Second)
	if keys := drills.EtcdKeys(t, f, spec.RoleEtcdMain, "/registry/events"); len(keys) != 0 {
		t.Errorf("etcd-main holds %d event keys, e.g. %s; events belong in etcd-events", len(keys), keys[0])
	}
	keys := drills.EtcdKeys(t, f, spec.RoleEtcdEvents, "/registry/")
	if !slices.Contains(keys, "/registry/events/default/"+name) {
		t.Errorf("etcd-events lacks /registry/events/default/%s; it holds %d keys", name, len(keys))
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "/registry/events/") {
			t.Errorf("etcd-events holds %s; only events belong there", k)
		}
	}
}

// Secrets reach etcd encrypted with the rendered secretbox key (CIS 1.2.27, 1.2.28). On either
// fixture.
func SecretsEncryptedAtRest(t *testing.T, f machines.Fleet) {
	ctx := context.Background()
	const plaintext = "rehearsal-plaintext-marker"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "encryption-check-"}, StringData: map[string]string{"value": plaintext}}
	secrets := drills.Clientset(t, f).CoreV1().Secrets(metav1.NamespaceDefault)
	created, err := secrets.Create(ctx, secret, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), created.Name, metav1.DeleteOptions{}) })
	cli, err := f.EtcdClient(spec.RoleEtcdMain)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "/registry/secrets/"+metav1.NamespaceDefault+"/"+created.Name)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the secret from etcd: %v", err)
	}
	raw := string(resp.Kvs[0].Value)
	if !strings.HasPrefix(raw, "k8s:enc:secretbox:v1:key1:") || strings.Contains(raw, plaintext) {
		t.Errorf("the secret is stored unencrypted in etcd-main: %.60q", raw)
	}
}

// TLS everywhere: etcd's client and peer ports and the apiserver refuse plain HTTP, etcd refuses
// TLS clients without a certificate from its CA, and an etcd cluster's peer port takes its own
// members and refuses the other cluster's and the apiserver's client certificate. On either
// fixture: the apiservers and etcd's client ports reached through the fixture's own way onto the
// machines' network, the peer ports through peerDial, from an address an etcd-main member's peer
// certificate names.
func TLSEverywhere(t *testing.T, l *machines.Layout, peerDial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	dial := l.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	if peerDial == nil {
		peerDial = dial
	}
	client := func(tc *tls.Config) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if strings.HasSuffix(addr, fmt.Sprintf(":%d", wellknown.EtcdPeerPort)) {
					return peerDial(ctx, network, addr)
				}
				return dial(ctx, network, addr)
			}}}
	}
	plain := client(nil)
	var targets []string
	for _, in := range append(l.Of(spec.RoleEtcdMain), l.Of(spec.RoleEtcdEvents)...) {
		targets = append(targets, fmt.Sprintf("%s:%d", in.IP, wellknown.EtcdClientPort), fmt.Sprintf("%s:%d", in.IP, wellknown.EtcdPeerPort))
		// Trusting the CA but presenting no client certificate.
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(l.Bundle.Pair(pki.EtcdCA(in.Role)).CertPEM))
		if resp, err := client(&tls.Config{RootCAs: pool}).Get(fmt.Sprintf("https://%s:%d/version", in.IP, wellknown.EtcdClientPort)); err == nil {
			resp.Body.Close()
			t.Errorf("%s answered a TLS client without a certificate: HTTP %d", in.Name, resp.StatusCode)
		}
	}
	b := l.Bundle
	for _, tc := range []struct {
		role, presented string
		want            bool
	}{
		{spec.RoleEtcdMain, pki.EtcdPeer(spec.RoleEtcdMain), true},
		{spec.RoleEtcdMain, pki.EtcdPeer(spec.RoleEtcdEvents), false},
		{spec.RoleEtcdMain, pki.APIServerEtcdClient, false},
		{spec.RoleEtcdEvents, pki.EtcdPeer(spec.RoleEtcdMain), false},
	} {
		in := l.Of(tc.role)[0]
		pair, err := tls.X509KeyPair([]byte(b.Pair(tc.presented).CertPEM), []byte(b.Pair(tc.presented).KeyPEM))
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(b.Pair(pki.EtcdCA(tc.role)).CertPEM))
		peer := client(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
		resp, err := peer.Get(fmt.Sprintf("https://%s:%d/version", in.IP, wellknown.EtcdPeerPort))
		if err == nil {
			resp.Body.Close()
		}
		if accepted := err == nil && resp.StatusCode == http.StatusOK; accepted != tc.want {
			t.Errorf("%s's peer port, presented %s: accepted %v (%v), want %v", in.Name, tc.presented, accepted, err, tc.want)
		}
	}
	for _, in := range l.Of(spec.RoleAPIServer) {
		targets = append(targets, fmt.Sprintf("%s:%d", in.IP, wellknown.APIServerPort))
	}
	for _, target := range targets {
		// Reachable first: a port nothing listens on refuses plain HTTP too, and proves nothing.
		conn, err := client(nil).Transport.(*http.Transport).DialContext(context.Background(), "tcp", target)
		if err != nil {
			t.Errorf("%s: %v", target, err)
			continue
		}
		conn.Close()
		resp, err := plain.Get("http://" + target + "/version")
		if err != nil {
			continue // the connection closed on a plain request
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
			t.Errorf("%s answered plain HTTP: %d %s", target, resp.StatusCode, body)
		}
	}
}

// Check 3: each member runs with the rendered quota, and a cluster with a tiny quota raises
// NOSPACE and recovers with the documented procedure (L04).
func EtcdQuotaAndNospaceRecovery(t *testing.T) {
	framework.NeedRehearsal(t)
	for _, role := range []string{spec.RoleEtcdMain, spec.RoleEtcdEvents} {
		want := framework.Running.Cluster.EtcdMain.QuotaBackendBytes
		if role == spec.RoleEtcdEvents {
			want = framework.Running.Cluster.EtcdEvents.QuotaBackendBytes
		}
		for _, in := range framework.Running.Of(role) {
			if got := quotaMetric(t, in.IP); got != want {
				t.Errorf("%s reports quota %d bytes, the stack renders %d", in.Name, got, want)
			}
		}
	}

	const tinyQuota = 8 << 20
	drill := *framework.Cluster
	drill.EtcdEvents.QuotaBackendBytes = tinyQuota
	p, err := framework.NewLayout(framework.Stack()+"-quota-drill", &drill, framework.BaseQuotaDrill)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := processes.UpEtcd(ctx, p, spec.RoleEtcdEvents, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Down(); err != nil {
			t.Error(err)
		}
	})
	if got := quotaMetric(t, p.Of(spec.RoleEtcdEvents)[0].IP); got != tinyQuota {
		t.Fatalf("drill etcd quota %d, want %d", got, tinyQuota)
	}
	cli, err := p.EtcdClient(spec.RoleEtcdEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	blob := make([]byte, 512<<10)
	var nospace error
	for i := 0; i < 200 && nospace == nil; i++ {
		_, _ = rand.Read(blob)
		if _, err := cli.Put(ctx, "/drill/blob", string(blob)); err != nil {
			if !strings.Contains(err.Error(), "database space exceeded") {
				t.Fatalf("put %d: %v, want NOSPACE", i, err)
			}
			nospace = err
		}
	}
	if nospace == nil {
		t.Fatal("200 puts of 512 KiB never raised NOSPACE")
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil || len(alarms.Alarms) == 0 {
		t.Fatalf("alarm list after NOSPACE: %v %v", alarms, err)
	}
	if _, err := cli.Put(ctx, "/drill/small", "x"); err == nil {
		t.Fatal("a write succeeded while the NOSPACE alarm was raised")
	}
	var endpoints []string
	for _, in := range p.Of(spec.RoleEtcdEvents) {
		endpoints = append(endpoints, machines.EtcdClientURL(in))
	}
	recover := exec.CommandContext(ctx, filepath.Join(framework.RepoRoot, "scripts", "etcd-nospace-recover.sh"))
	recover.Env = append(os.Environ(),
		"ETCDCTL="+filepath.Join(p.Tools, "etcdctl"),
		"ETCDCTL_ENDPOINTS="+strings.Join(endpoints, ","),
		"ETCDCTL_CACERT="+p.PKIFile(pki.EtcdServersCA, "crt"),
		"ETCDCTL_CERT="+p.PKIFile(pki.APIServerEtcdClient, "crt"),
		"ETCDCTL_KEY="+p.PKIFile(pki.APIServerEtcdClient, "key"))
	if out, err := recover.CombinedOutput(); err != nil {
		t.Fatalf("scripts/etcd-nospace-recover.sh: %v\n%s", err, out)
	} else {
		t.Logf("recovery:\n%s", out)
	}
	if _, err := cli.Put(ctx, "/drill/small", "x"); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	if alarms, err := cli.AlarmList(ctx); err != nil || len(alarms.Alarms) != 0 {
		t.Fatalf("alarms after recovery: %v %v", alarms.Alarms, err)
	}
}

// Check 4: etcd-main keeps serving writes with a minority of members down, refuses them
// without quorum, and loses no acknowledged write when the members return.
func EtcdQuorumLossAndRestore(t *testing.T) {
	framework.NeedRehearsal(t)
	members := framework.Running.Of(spec.RoleEtcdMain)
	tolerated := (len(members) - 1) / 2
	if tolerated < 1 {
		t.Skipf("etcd-main has %d members: no minority to lose", len(members))
	}
	ctx := context.Background()
	cs := framework.Clientset(t)
	ns := drills.Namespace(t, cs, "drill-quorum")
	// A write that times out may still commit later; only acknowledged writes are owed.
	var acked []string
	attempts := 0
	write := func(timeout time.Duration) error {
		attempts++
		name := fmt.Sprintf("write-%d", attempts)
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := cs.CoreV1().ConfigMaps(ns).Create(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err == nil {
			acked = append(acked, name)
		}
		return err
	}
	down := members[len(members)-tolerated:]
	t.Cleanup(func() { drills.Restart(t, framework.Running, members, spec.RoleEtcdMain) })
	framework.StopAll(t, down, "etcd")
	// Losing the leader costs an election; writes are owed only once the survivors have one.
	if err := drills.WaitUntil(30*time.Second, func() error { return hasLeader(members[:len(members)-tolerated]) }); err != nil {
		t.Fatalf("the %d surviving members elected no leader: %v", len(members)-tolerated, err)
	}
	for i := 0; i < 10; i++ {
		if err := write(20 * time.Second); err != nil {
			t.Fatalf("write with %d of %d members down: %v", tolerated, len(members), err)
		}
	}
	framework.StopAll(t, members[len(members)-tolerated-1:len(members)-tolerated], "etcd")
	err := write(20 * time.Second)
	if err == nil {
		t.Fatalf("a write succeeded with %d of %d members down", tolerated+1, len(members))
	}
	t.Logf("without quorum, a write fails with: %v", err)
	drills.Restart(t, framework.Running, members, spec.RoleEtcdMain)
	if err := drills.WaitUntil(2*time.Minute, func() error { return write(10 * time.Second) }); err != nil {
		t.Fatalf("writes did not come back after the members restarted: %v", err)
	}
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, cm := range list.Items {
		stored = append(stored, cm.Name)
	}
	for _, name := range acked {
		if !slices.Contains(stored, name) {
			t.Errorf("acknowledged write %s is lost", name)
		}
	}
	t.Logf("%d acknowledged writes, all present after the restore", len(acked))
}

// Check 5: a member whose local disk came back empty rejoins (drills.WipedMemberRejoins).
func WipedMemberRejoins(t *testing.T) {
	framework.NeedRehearsal(t)
	drills.WipedMemberRejoins(t, framework.Running)
}

// Check 6: an apiserver machine lost (drills.APIServerLoss).
func APIServerFailover(t *testing.T) {
	framework.NeedRehearsal(t)
	drills.APIServerLoss(t, framework.Running)
}

// Check 7: the events etcd lost (drills.EventsEtcdLoss).
func EventsEtcdOutage(t *testing.T) {
	framework.NeedRehearsal(t)
	drills.EventsEtcdLoss(t, framework.Running)
}

// Check 8: the scheduler bin-packs: pods fill the most-allocated node first (L12).
func SchedulerBinPacks(t *testing.T) {
	framework.NeedRehearsal(t)
	var pool spec.Pool
	for _, p := range framework.Running.Cluster.Pools {
		if !p.IsGPU() && !p.System && min(p.MaxNodes, framework.NodesPerPool()) >= 2 {
			pool = p
			break
		}
	}
	if pool.Name == "" {
		t.Skip("no CPU pool with two simulated nodes")
	}
	capacity, _ := spec.VMCapacity(pool.VMSize)
	cpuMilli, _ := spec.Allocatable(capacity, pool.MaxPods)
	fits := int(cpuMilli / 1000)
	ctx := context.Background()
	cs := framework.Clientset(t)
	ns := drills.Namespace(t, cs, "drill-binpack")
	placed := map[string]int{}
	var order []string
	for i := range fits + 2 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("packed-%d", i)},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{wellknown.PoolLabel: pool.Name},
				Containers: []corev1.Container{{Name: "work", Image: spec.DefaultPauseImage,
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
			},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var node string
		if err := drills.WaitUntil(30*time.Second, func() error {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if node = got.Spec.NodeName; node == "" {
				return fmt.Errorf("pod %s not scheduled", pod.Name)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		placed[node]++
		order = append(order, node)
	}
	if len(placed) != 2 || placed[order[0]] != fits {
		t.Fatalf("%d one-CPU pods on nodes with room for %d landed %v (in order %v); bin-packing fills one node, then the next", len(order), fits, placed, order)
	}
}

// helpers

// quotaMetric reads etcd_server_quota_backend_bytes from a member's metrics listener.
func quotaMetric(t *testing.T, ip string) int64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", ip, wellknown.EtcdMetricsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd_server_quota_backend_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatalf("%s exposes no etcd_server_quota_backend_bytes", ip)
	return 0
}

func leaseHolder(t *testing.T, cs *kubernetes.Clientset, name string) string {
	t.Helper()
	lease, err := cs.CoordinationV1().Leases("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("lease %s: %v", name, err)
	}
	return *lease.Spec.HolderIdentity
}

// hasLeader reports whether the given etcd members agree on a leader among themselves (right
// after a kill, followers still name the dead leader until the election timeout).
func hasLeader(members []machines.Instance) error {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name
	}
	cli, err := framework.Running.EtcdClient(spec.RoleEtcdMain, names...)
	if err != nil {
		return err
	}
	defer cli.Close()
	ids, leaders := map[uint64]bool{}, map[uint64]bool{}
	for _, ep := range cli.Endpoints() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err != nil {
			return err
		}
		ids[st.Header.MemberId], leaders[st.Leader] = true, true
	}
	for leader := range leaders {
		if len(leaders) != 1 || !ids[leader] {
			return fmt.Errorf("members %v name leaders %v", names, leaders)
		}
	}
	return nil
}
