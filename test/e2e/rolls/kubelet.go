package rolls

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/dataplane"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// The upgrade drill's kubelet part on real kubelets (the rehearsal's workers are KWOK nodes): every
// worker runs the previous minor's kubelet, as a VM of the previous image would; `make roll`'s
// roller takes the workers to the pinned release: each cordoned, drained and replaced by a new
// machine from the image, its real kubelet joining on the pinned version. Under a writer that
// records every acknowledged write and a prober reading through the load balancer ten times a
// second; afterwards pods on the new machines reach each other, their Services and DNS. The
// control plane is on the pinned release already: the apiservers' part of a roll, one at a time
// out of the load balancer, is drilled on the process rehearsal (test/e2e/rolls) through the same
// load balancer stand-in, and here it would only add two machines' boots.
func KubeletUpgradeRoll(t *testing.T) {
	framework.NeedBoot(t)
	previous := filepath.Join(framework.RepoRoot, ".tools", "versions", "kubernetes-"+spec.PreviousKubernetesVersion, "kubelet")
	kubelet, err := os.ReadFile(previous)
	if err != nil {
		t.Fatalf("%v (scripts/toolchain.sh upgrades builds it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cs := drills.Clientset(t, framework.Booted)
	desired := framework.Booted.Cluster
	applied, err := desired.Clone()
	if err != nil {
		t.Fatal(err)
	}
	applied.Versions.Kubelet = spec.PreviousKubernetesVersion

	workers := framework.WorkerNames()
	// Set-up, before the writer and prober start: every worker's kubelet swapped for the previous
	// minor's and restarted in place (a reboot of each costs a minute and proves nothing more here).
	for _, w := range workers {
		m, err := framework.Booted.Machine(w)
		if err != nil {
			t.Fatal(err)
		}
		// Written beside the running binary and renamed over it: a running executable cannot be written.
		staged := machine.BinDir + "/kubelet.previous"
		if err := os.WriteFile(filepath.Join(fmt.Sprintf("/proc/%d/root", m.PID), staged), kubelet, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := framework.Booted.Exec(ctx, w, "sh", "-c", "mv -f "+staged+" "+machine.BinDir+"/kubelet && systemctl restart "+machine.KubeletUnit); err != nil {
			t.Fatalf("%s: %v: %s", w, err, out)
		}
	}
	for _, w := range workers {
		if err := nodeOn(ctx, cs, w, spec.PreviousKubernetesVersion); err != nil {
			t.Fatalf("%s on the previous kubelet: %v", w, err)
		}
	}
	before, err := roll.Report(ctx, framework.Booted, desired)
	if err != nil {
		t.Fatal(err)
	}
	roll.PrintMachines(os.Stderr, before, time.Now())
	for _, m := range before {
		if slices.Contains(workers, m.Name) && (!m.Stale() || m.Runs != spec.PreviousKubernetesVersion) {
			t.Errorf("%s reports kubelet %q before the roll; want %s, stale", m.Name, m.Runs, spec.PreviousKubernetesVersion)
		}
	}

	ns := drills.Namespace(t, cs, "drill-kubelet-roll")
	writer := drills.StartWriter(cs, ns)
	defer writer.Stop()
	prober := drills.StartProber(cs, 10, 2*time.Second)
	defer prober.Stop()
	roller := &roll.Roller{Target: framework.Booted.RollTo(desired, framework.PlanDir), Applied: applied, Desired: desired,
		Journal: filepath.Join(t.TempDir(), "roll.json"), Progress: os.Stderr, ValidationPause: 500 * time.Millisecond}
	began := time.Now()
	results, err := roller.Run(ctx)
	if err != nil {
		var why []string
		for _, w := range workers {
			why = append(why, framework.Booted.Diagnose(w, "clusterforge-identity.service", machine.ContainerdUnit, machine.KubeletUnit))
		}
		t.Fatalf("%v\n%s", err, strings.Join(why, "\n"))
	}
	ok, fail, failures := prober.Window()
	acked := writer.Stop()
	var perMachine []string
	for _, r := range results {
		perMachine = append(perMachine, r.Name+" "+r.Took.Round(time.Second).String())
	}
	t.Logf("rolled %d machines in %s (%s); API %d/%d probes answered; %d acknowledged writes",
		len(results), time.Since(began).Round(time.Second), strings.Join(perMachine, ", "), ok, ok+fail, len(acked))
	if lost := writer.Lost(t, cs); len(lost) > 0 {
		t.Errorf("%d of %d acknowledged writes lost: %v", len(lost), len(acked), lost)
	}
	if avail := float64(ok) / float64(max(1, ok+fail)); avail < 0.999 {
		t.Errorf("API availability %.2f%% through the load balancer, want at least 99.9%%; failures: %v", 100*avail, failures)
	}
	rolled := map[string]bool{}
	for _, r := range results {
		rolled[r.Name] = true
	}
	for _, name := range workers {
		if !rolled[name] {
			t.Errorf("the roll did not replace %s", name)
		}
	}
	for _, name := range instanceNames(spec.RoleAPIServer) {
		if rolled[name] {
			t.Errorf("the roll replaced %s, whose release did not change", name)
		}
	}
	after, err := roll.Report(ctx, framework.Booted, desired)
	if err != nil {
		t.Fatal(err)
	}
	roll.PrintMachines(os.Stderr, after, time.Now())
	for _, m := range after {
		if m.Stale() {
			t.Errorf("%s is stale after the roll: runs %q, want %q %s", m.Name, m.Runs, m.Want, m.Problem)
		}
	}

	cl, err := dataplane.StartClients(cs, "boot-roll-dataplane")
	if err != nil {
		t.Fatal(err)
	}
	dataplane.CheckPodsReachPodsAndServices(t, cl)
	dataplane.CheckPodDNS(t, cl, "boot-roll-dataplane")
}

// nodeOn waits until the node is Ready with its kubelet on version.
func nodeOn(ctx context.Context, cs *kubernetes.Clientset, name, version string) error {
	return drills.WaitNode(ctx, cs, name, 3*time.Minute, func(n *corev1.Node) error {
		if got := n.Status.NodeInfo.KubeletVersion; got != version {
			return fmt.Errorf("kubelet %s", got)
		}
		return nodestatus.Ready(n, time.Now())
	})
}

func instanceNames(role string) []string {
	var out []string
	for _, in := range framework.Booted.Of(role) {
		out = append(out, in.Name)
	}
	return out
}
