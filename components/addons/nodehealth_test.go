package addons

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/test/toolchain"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterforge/clusterforge/components/ops/remediation"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// The kernel rules as the pinned node-problem-detector reads them: the real binary follows a log
// of lines in the kernel's own wording (its printk formats, the NVIDIA and mlx5 drivers') and
// reports, on its Prometheus endpoint, which conditions it set and which events it counted.
func TestNodeProblemDetectorReadsKernelLines(t *testing.T) {
	bin := toolchain.Binary(t, "addons/node-problem-detector")
	dir := t.TempDir()
	log, config := filepath.Join(dir, "kern.log"), filepath.Join(dir, KernelMonitorKey)
	if err := os.WriteFile(log, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte(KernelMonitor(KernelLogFile(log))), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freeLoopbackPort(t)
	cmd := exec.Command(bin, "--logtostderr", "--config.system-log-monitor="+config, "--enable-k8s-exporter=false",
		"--port=0", "--prometheus-address=127.0.0.1", fmt.Sprintf("--prometheus-port=%d", port))
	cmd.Env = append(os.Environ(), "NODE_NAME=drill-node")
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := []string{
		"INFO: task containerd:4242 blocked for more than 120 seconds.",
		"INFO: task python3:777 blocked for more than 122 seconds.",
		"EXT4-fs (sdb1): Remounting filesystem read-only",
		"NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
		"NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
		"nf_conntrack: nf_conntrack: table full, dropping packet",
		"NETDEV WATCHDOG: eth1 (mlx5_core): transmit queue 5 timed out 5376 ms",
		"mlx5_core 0000:00:02.0: poll_health:835:(pid 0): device's health compromised - reached miss count",
		"Out of memory: Killed process 4321 (python) total-vm:1048576kB, anon-rss:524288kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1100kB oom_score_adj:0",
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range lines {
		if _, err := fmt.Fprintf(f, "%s kernel: %s\n", time.Now().UTC().Format(time.RFC3339Nano), line); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{
		`problem_gauge{reason="ContainerdHung",type="KernelDeadlock"}`:           "1",
		`problem_gauge{reason="DockerHung",type="KernelDeadlock"}`:               "0",
		`problem_gauge{reason="FilesystemIsReadOnly",type="ReadonlyFilesystem"}`: "1",
		`problem_gauge{reason="GPUXidFatal",type="GPUProblem"}`:                  "1",
		`problem_gauge{reason="NICHealthCompromised",type="NetworkProblem"}`:     "1",
		`problem_counter{reason="TaskHung"}`:                                     "2",
		`problem_counter{reason="GPUXid"}`:                                       "2",
		`problem_counter{reason="ConntrackFull"}`:                                "1",
		`problem_counter{reason="TransmitQueueTimedOut"}`:                        "1",
		`problem_counter{reason="OOMKilling"}`:                                   "1",
		`problem_counter{reason="KernelOops"}`:                                   "0",
		`problem_counter{reason="IOError"}`:                                      "0",
	}
	sample := regexp.MustCompile(`(?m)^(problem_\w+\{[^}]*\}) (\S+)$`)
	var got map[string]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = map[string]string{}
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, m := range sample.FindAllStringSubmatch(string(body), -1) {
				got[m[1]] = m[2]
			}
		}
		missing := 0
		for k, v := range want {
			if got[k] != v {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %s", k, got[k], v)
		}
	}
	t.Logf("node-problem-detector:\n%s", stderr.String())
}

// Remediation marks a node on every condition the agent sets, and a file stands in for the
// kernel log device where the rehearsal's machines share one kernel.
func TestNodeProblemDetectorConditionsAndKernelLog(t *testing.T) {
	problems := remediation.DefaultPolicy().Problems
	for _, r := range kernelRules {
		if r.Type == "permanent" && !slices.Contains(problems, remediation.Problem{Type: corev1.NodeConditionType(r.Condition), Status: corev1.ConditionTrue}) {
			t.Errorf("rule %s sets %s=True, on which remediation does not act", r.Reason, r.Condition)
		}
	}
	objs := nodeProblemDetector(stacks(t)["dev"])
	pod := PodTemplate(objs[1]).Spec
	if got := pod.Containers[0].VolumeMounts[1]; got.MountPath != Kmsg.Path || !got.ReadOnly {
		t.Errorf("kernel log mount %+v, want %s read-only", got, Kmsg.Path)
	}
	const file = "/var/log/clusterforge-kernel.log"
	ReadKernelLogFrom(objs, KernelLogFile(file))
	pod = PodTemplate(objs[1]).Spec
	if v := pod.Volumes[1].HostPath; v.Path != file || *v.Type != corev1.HostPathFileOrCreate {
		t.Errorf("kernel log volume %+v, want %s created if missing", v, file)
	}
	if m := pod.Containers[0].VolumeMounts[1]; m.MountPath != file {
		t.Errorf("kernel log mount %+v, want %s", m, file)
	}
	if cm := objs[len(objs)-1].(*corev1.ConfigMap); !strings.Contains(cm.Data[KernelMonitorKey], `"logPath": "`+file+`"`) {
		t.Errorf("the monitor does not read %s:\n%s", file, cm.Data[KernelMonitorKey])
	}
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// node-problem-detector patches all its conditions at once: a condition of its config that the
// node agents' policy does not count as its own would get every patch refused.
func TestNodeProblemDetectorOwnsTheConditionsItSets(t *testing.T) {
	sets := map[string]bool{}
	for _, c := range kernelConditions {
		sets[c["type"]] = true
	}
	for _, r := range kernelRules {
		if r.Condition != "" {
			sets[r.Condition] = true
		}
	}
	owned := map[string]bool{}
	for _, c := range wellknown.NodeProblemConditions {
		owned[c] = true
	}
	if !maps.Equal(sets, owned) {
		t.Errorf("node-problem-detector sets %v, its policy lets it change %v", slices.Sorted(maps.Keys(sets)), wellknown.NodeProblemConditions)
	}
}
