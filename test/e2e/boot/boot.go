package boot

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/infra/offline"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
)

// declaredUnits are the units a role's user-data enables and starts, read from the plan's bytes.
func declaredUnits(t *testing.T, role string) []string {
	t.Helper()
	data, err := os.ReadFile(offline.UserDataPath(framework.PlanDir, role))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		RunCmd [][]string `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range doc.RunCmd {
		if len(cmd) > 2 && cmd[0] == "systemctl" && cmd[1] == "enable" {
			return slices.DeleteFunc(slices.Clone(cmd[2:]), func(a string) bool { return strings.HasPrefix(a, "--") })
		}
	}
	t.Fatalf("%s user-data enables no units", role)
	return nil
}

// On every machine cloud-init finished with no error, nothing failed, and every unit the
// user-data starts is running, or exited as a oneshot that succeeded.
func EveryMachineBootedCleanly(t *testing.T) {
	framework.NeedBoot(t)
	ctx := context.Background()
	for _, m := range framework.Booted.Machines {
		t.Run(m.Name, func(t *testing.T) {
			status, err := framework.Booted.Exec(ctx, m.Name, "cloud-init", "status", "--long", "--format=json")
			if err != nil {
				t.Fatal(err)
			}
			var ci struct {
				Status            string         `json:"status"`
				Errors            []any          `json:"errors"`
				RecoverableErrors map[string]any `json:"recoverable_errors"`
			}
			if err := json.Unmarshal([]byte(status), &ci); err != nil {
				t.Fatalf("cloud-init status: %v: %s", err, status)
			}
			if ci.Status != "done" || len(ci.Errors) > 0 || len(ci.RecoverableErrors) > 0 {
				t.Errorf("cloud-init: %s", status)
			}
			if failed, err := framework.Booted.Exec(ctx, m.Name, "systemctl", "--failed", "--no-legend", "--plain"); err != nil || strings.TrimSpace(failed) != "" {
				t.Errorf("failed units: %v %s", err, failed)
			}
			for _, unit := range declaredUnits(t, m.Role) {
				out, err := framework.Booted.Exec(ctx, m.Name, "systemctl", "show", "--property=ActiveState,SubState,Type,Result", unit)
				if err != nil {
					t.Fatal(err)
				}
				ok := strings.Contains(out, "ActiveState=active\n") && strings.Contains(out, "Result=success\n") &&
					(strings.Contains(out, "SubState=running\n") || strings.Contains(out, "Type=oneshot\n") && strings.Contains(out, "SubState=exited\n"))
				if !ok {
					t.Errorf("%s: %s", unit, strings.ReplaceAll(strings.TrimSpace(out), "\n", " "))
				}
			}
			// The image check that let this machine boot refuses its own image's manifest with
			// every release moved: a stack pinning other releases than the image carries.
			other := "/run/clusterforge-image-manifest.other"
			moved := fmt.Sprintf(`sed 's/"v\([0-9]\)/"v9\1/' %s > %s && %s/image-check %s`, machine.ImageManifestPath, other, machine.LibexecDir, other)
			if out, err := framework.Booted.Exec(ctx, m.Name, "sh", "-c", moved); err == nil || !strings.Contains(out, "the stack pins versions.") {
				t.Errorf("the image check on a manifest with other releases: %v: %s; want it refused, naming the field", err, out)
			}
		})
	}
}

// This host reaches the booted cluster only through loopback: the host kubeconfig names a
// loopback server and checks the apiserver's certificate for a name it carries, and a client on
// this host's network, with no dialer of its own, lists the nodes through it.
func HostReachesTheAPIThroughLoopback(t *testing.T) {
	framework.NeedBoot(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", framework.Booted.HostKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Fatalf("the host kubeconfig's server is %s, want a loopback address", cfg.Host)
	}
	if cfg.TLSClientConfig.ServerName == "" {
		t.Error("the host kubeconfig checks the certificate for no name")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) == 0 {
		t.Error("the host kubeconfig lists no nodes")
	}
}

// The cluster forms: both etcd clusters hold exactly the planned members, all started; every
// apiserver is in the load balancer's rotation; the controller-manager and scheduler leases are
// held by apiserver machines; every worker machine is a Ready node of its pool.
func ClusterForms(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, e := range framework.Booted.Cluster.EtcdClusters() {
		cli, err := framework.Booted.EtcdClient(e.Role)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.MemberList(ctx)
		cli.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, m := range resp.Members {
			if len(m.ClientURLs) == 0 || m.IsLearner {
				t.Errorf("%s member %s is not a started voter", e.Role, m.Name)
			}
			got = append(got, m.Name)
		}
		for _, m := range e.Members {
			want = append(want, m.Name)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s members %v, planned %v", e.Role, got, want)
		}
	}
	for _, in := range framework.Booted.Of(spec.RoleAPIServer) {
		if ok, err := framework.Booted.LBBackendHealthy(fmt.Sprintf("%s:%d", in.IP, wellknown.APIServerPort)); err != nil || !ok {
			t.Errorf("%s is not in the load balancer's rotation: %v", in.Name, err)
		}
	}
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		holder, err := framework.Booted.LeaseMachine(ctx, lease)
		if err != nil {
			t.Error(err)
		} else if m, _ := framework.Booted.Machine(holder); m.Role != spec.RoleAPIServer {
			t.Errorf("lease %s held by %s, a %s machine", lease, holder, m.Role)
		}
	}
	nodes, err := drills.Clientset(t, framework.Booted).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	workers := framework.WorkerNames()
	for _, n := range nodes.Items {
		workers = slices.DeleteFunc(workers, func(w string) bool { return w == n.Name })
	}
	if len(workers) > 0 {
		t.Errorf("worker machines %v are not nodes", workers)
	}
}

// A pod of the preloaded app image runs on a booted worker with nothing pulled (L25, L26).
func PreloadedPodRunsWithNothingPulled(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	app, node := framework.PreloadedApp(t), framework.FirstWorker(t)
	cs := drills.Clientset(t, framework.Booted)
	store := func() string {
		out, err := framework.Booted.Exec(ctx, node, "du", "-sb", machine.ContainerdRoot+"/io.containerd.content.v1.content/blobs")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(out)[0]
	}
	before := store()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "preloaded-app", Namespace: drills.Namespace(t, cs, "boot-preloaded")},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "app", Image: app, ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := drills.WaitUntil(3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && p.Status.Phase != corev1.PodRunning {
			err = fmt.Errorf("pod %s is %s", pod.Name, p.Status.Phase)
		}
		return err
	})
	if err != nil {
		log, _ := framework.Booted.UnitLog(ctx, node, machine.KubeletUnit)
		t.Fatalf("the preloaded pod did not run: %v\nkubelet:\n%s", err, tail(log, 4000))
	}
	events, err := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	present := false
	for _, e := range events.Items {
		if e.Reason == "Pulling" {
			t.Errorf("the kubelet pulled: %s", e.Message)
		}
		present = present || (e.Reason == "Pulled" && strings.Contains(e.Message, "already present on machine"))
	}
	if !present {
		t.Errorf("no event says %s was already present on the machine", app)
	}
	if after := store(); after != before {
		t.Errorf("containerd's content store grew from %s to %s bytes: something was pulled", before, after)
	}
}

// An etcd machine whose local disk is gone keeps etcd off its OS disk: etcd-disk fails saying
// why, etcd-join and etcd never start, nothing is written at the data dir. Given a disk again,
// the member rejoins.
func MissingDiskKeepsEtcdOffTheOSDisk(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	members := framework.Booted.Of(spec.RoleEtcdEvents)
	victim := members[0].Name
	if err := framework.Booted.StopMachine(ctx, victim, true); err != nil {
		t.Fatal(err)
	}
	if err := framework.Booted.RemoveLocalDisk(victim); err != nil {
		t.Fatal(err)
	}
	if err := framework.Booted.StartMachine(ctx, victim); err != nil {
		t.Fatal(err)
	}
	err := drills.WaitUntil(time.Minute, func() error {
		out, _ := framework.Booted.Exec(ctx, victim, "systemctl", "show", "--property=ActiveState", "etcd-disk.service")
		if !strings.Contains(out, "ActiveState=failed") {
			return fmt.Errorf("etcd-disk.service: %s", out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if log, _ := framework.Booted.UnitLog(ctx, victim, "etcd-disk.service"); !strings.Contains(log, "no local temp/NVMe disk under /dev/disk/azure") {
		t.Errorf("etcd-disk does not say why it failed:\n%s", log)
	}
	for _, unit := range []string{"etcd-join.service", "etcd.service"} {
		out, _ := framework.Booted.Exec(ctx, victim, "systemctl", "show", "--property=ActiveState,ExecMainPID", unit)
		if !strings.Contains(out, "ActiveState=inactive") || !strings.Contains(out, "ExecMainPID=0") {
			t.Errorf("%s ran without its disk: %s", unit, out)
		}
	}
	if out, err := framework.Booted.Exec(ctx, victim, "ls", "-A", machine.EtcdDataDir); err == nil && strings.TrimSpace(out) != "" {
		t.Errorf("%s on the OS disk holds %q", machine.EtcdDataDir, out)
	}
	if err := framework.Booted.StopMachine(ctx, victim, true); err != nil {
		t.Fatal(err)
	}
	if err := framework.Booted.WipeLocalDisk(victim); err != nil {
		t.Fatal(err)
	}
	drills.Restart(t, framework.Booted, []machines.Instance{members[0]}, spec.RoleEtcdEvents)
}

// A clean reboot of an etcd machine keeps its local disk: systemd shuts the machine down, it
// boots again, etcd-join finds its data and the member comes back with its own id, no rejoin.
func CleanRebootKeepsTheMember(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	victim := framework.Booted.Of(spec.RoleEtcdMain)[0].Name
	cli, err := framework.Booted.EtcdClient(spec.RoleEtcdMain)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	before := drills.MemberIDs(t, ctx, cli)
	if err := framework.Booted.StopMachine(ctx, victim, false); err != nil {
		t.Fatal(err)
	}
	if err := framework.Booted.StartMachine(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := framework.Booted.WaitEtcdHealthy(ctx, spec.RoleEtcdMain); err != nil {
		t.Fatal(err)
	}
	if after := drills.MemberIDs(t, ctx, cli); after[victim] != before[victim] {
		t.Errorf("%s came back as member %x, was %x: a reboot must keep the member", victim, after[victim], before[victim])
	}
	if log, _ := framework.Booted.UnitLog(ctx, victim, "etcd-join.service"); strings.Contains(log, "removed from cluster") {
		t.Errorf("etcd-join removed the rebooted member:\n%s", log)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
