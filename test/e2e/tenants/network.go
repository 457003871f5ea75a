package tenants

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterforge/clusterforge/components/ops/teams"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/netns"
	"github.com/clusterforge/clusterforge/test/podsecurity"
)

// Teams are apart on the network: the NetworkPolicy clusterforge-ops keeps in every team namespace
// (teams.IsolationName), enforced by the real azure-npm on every worker. A server in team b's pod
// is reached by b's other pod, at its pod IP and through its Service; team a's pod reaches it by
// neither (its connections time out: the packets are dropped, nothing answers), and still
// resolves names through cluster DNS.
func TeamsAreApartOnTheNetwork(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	admin := drills.Clientset(t, framework.Booted)
	a := drills.TeamNamespace(t, admin, "drill-network-a", "a")
	b := drills.TeamNamespace(t, admin, "drill-network-b", "b")
	serverLabels := map[string]string{"app": "server"}
	type member struct{ ns, name string }
	client, server, peer := member{a, "client"}, member{b, "server"}, member{b, "peer"}
	netnsOf := map[member]string{}
	ipOf := map[member]string{}
	for _, m := range []member{client, server, peer} {
		drills.TeamQuotaHeld(t, admin, m.ns)
		p := podsecurity.Restricted(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: m.name}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "app", Image: framework.Booted.Cluster.Versions.PauseImage}}}})
		if m == server {
			p.Labels = serverLabels
		}
		if _, err := admin.CoreV1().Pods(m.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []member{client, server, peer} {
		var node string
		if err := drills.WaitUntil(2*time.Minute, func() error {
			p, err := admin.CoreV1().Pods(m.ns).Get(ctx, m.name, metav1.GetOptions{})
			if err == nil && (p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "") {
				err = fmt.Errorf("pod %s/%s is %s", m.ns, m.name, p.Status.Phase)
			}
			if err == nil {
				node, ipOf[m] = p.Spec.NodeName, p.Status.PodIP
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		path, err := framework.Booted.PodNetns(ctx, node, m.ns, m.name)
		if err != nil {
			t.Fatal(err)
		}
		netnsOf[m] = path
	}
	const port = 8080
	l, err := netns.ListenerIn(netnsOf[server], "tcp", ":"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	svc, err := admin.CoreV1().Services(b).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "server"}, Spec: corev1.ServiceSpec{
		Selector: serverLabels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(port)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(from member, addr string) error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		conn, err := netns.DialerIn(netnsOf[from])(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err
	}
	targets := []string{net.JoinHostPort(ipOf[server], strconv.Itoa(port)), net.JoinHostPort(svc.Spec.ClusterIP, "80")}
	// azure-npm programs a policy within seconds, but enforces nothing until its start-up is done
	// (it waits on its telemetry first): a node booted moments ago may not be there yet.
	if err := drills.WaitUntil(5*time.Minute, func() error {
		for _, to := range targets {
			if err := dial(peer, to); err != nil {
				return fmt.Errorf("team b's own pod does not reach %s: %v", to, err)
			}
			if err := dial(client, to); err == nil {
				return fmt.Errorf("team a's pod reaches team b's server at %s (is %s/%s in force?)", to, b, teams.IsolationName)
			} else if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("team a's pod to %s: %v, want no answer (the packets dropped)", to, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	dnsServer := net.JoinHostPort(framework.Booted.Cluster.DNSServiceIP(), "53")
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return netns.DialerIn(netnsOf[client])(ctx, network, dnsServer)
	}}
	name := "server." + b + ".svc." + wellknown.ClusterDomain
	if ips, err := resolver.LookupHost(ctx, name); err != nil || len(ips) != 1 || ips[0] != svc.Spec.ClusterIP {
		t.Errorf("team a's pod resolves %s to %v (%v), want %s through cluster DNS", name, ips, err, svc.Spec.ClusterIP)
	}
}
