package processes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// CISBenchmark is the kube-bench benchmark the control plane is checked against: the newest the
// pinned kube-bench has. It maps no minor past 1.34 to a benchmark, so the run names it.
const CISBenchmark = "cis-1.12"

// CISResult is one kube-bench check.
type CISResult struct {
	ID     string `json:"test_number"`
	Text   string `json:"test_desc"`
	Status string `json:"status"` // PASS, FAIL, WARN or INFO
}

// CIS runs kube-bench's master and etcd checks against the rehearsed processes and writes the
// report to <dir>/cis.txt. kube-bench reads the flags of the first running process of each
// component and the files our layout keeps: units stand where kubeadm keeps pod manifests.
func (p *Layout) CIS(ctx context.Context) ([]CISResult, error) {
	cfg, err := p.kubeBenchConfig()
	if err != nil {
		return nil, err
	}
	run := func(extra ...string) ([]byte, error) {
		args := append([]string{"run", "--targets", "master,etcd", "--benchmark", CISBenchmark,
			"--config-dir", cfg, "--config", filepath.Join(cfg, "config.yaml")}, extra...)
		cmd := exec.CommandContext(ctx, filepath.Join(p.Tools, "kube-bench"), args...)
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("kube-bench: %w", err)
		}
		return out, nil
	}
	text, err := run()
	if err != nil {
		return nil, err
	}
	if err := machines.WriteFile(filepath.Join(p.Dir, "cis.txt"), string(text), 0o644); err != nil {
		return nil, err
	}
	raw, err := run("--json")
	if err != nil {
		return nil, err
	}
	var report struct {
		Controls []struct {
			Tests []struct {
				Results []CISResult `json:"results"`
			} `json:"tests"`
		} `json:"Controls"`
	}
	if err := json.Unmarshal(raw, &report); err != nil {
		return nil, fmt.Errorf("kube-bench --json: %w", err)
	}
	var results []CISResult
	for _, c := range report.Controls {
		for _, t := range c.Tests {
			results = append(results, t.Results...)
		}
	}
	return results, nil
}

// kubeBenchConfig copies kube-bench's checks and points them at the first apiserver and etcd-main
// machine (deviation "OS disk"): the component files in config.yaml, and the paths the
// benchmark's audits hard-code under /etc/kubernetes.
func (p *Layout) kubeBenchConfig() (string, error) {
	src := filepath.Join(filepath.Dir(p.Tools), "share", "kube-bench", "cfg")
	dst := filepath.Join(p.Dir, "kube-bench", "cfg")
	if err := os.RemoveAll(dst); err != nil {
		return "", err
	}
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return "", fmt.Errorf("copy kube-bench checks from %s (run `make tools`): %w", src, err)
	}
	apiserver, etcd := p.Of(spec.RoleAPIServer)[0], p.Of(spec.RoleEtcdMain)[0]
	onAPIServer := func(path string) string { return p.onMachine(apiserver, path) }
	unit := func(in machines.Instance, name string) string {
		return p.onMachine(in, machine.UnitDir+"/"+name+".service")
	}

	configPath := filepath.Join(dst, "config.yaml")
	data, err := os.ReadFile(configPath)
	if err != nil {
		return "", err
	}
	var config map[string]any
	if err := yaml.Unmarshal(data, &config); err != nil {
		return "", err
	}
	master, _ := config["master"].(map[string]any)
	set := func(component string, fields map[string]any) error {
		c, ok := master[component].(map[string]any)
		if !ok {
			return fmt.Errorf("kube-bench config.yaml has no master.%s", component)
		}
		for k, v := range fields {
			c[k] = v
		}
		return nil
	}
	for component, fields := range map[string]map[string]any{
		"apiserver": {"confs": []string{unit(apiserver, "kube-apiserver")}, "defaultconf": unit(apiserver, "kube-apiserver")},
		"controllermanager": {"confs": []string{unit(apiserver, "kube-controller-manager")}, "defaultconf": unit(apiserver, "kube-controller-manager"),
			"kubeconfig": []string{onAPIServer(machine.ControllerManagerKubeconfig)}, "defaultkubeconfig": onAPIServer(machine.ControllerManagerKubeconfig)},
		"scheduler": {"confs": []string{unit(apiserver, "kube-scheduler")}, "defaultconf": unit(apiserver, "kube-scheduler"),
			"kubeconfig": []string{onAPIServer(machine.SchedulerKubeconfig)}, "defaultkubeconfig": onAPIServer(machine.SchedulerKubeconfig)},
		"etcd": {"confs": []string{unit(etcd, "etcd")}, "defaultconf": unit(etcd, "etcd"),
			"datadirs": []string{p.onMachine(etcd, machine.EtcdDataDir)}, "defaultdatadir": p.onMachine(etcd, machine.EtcdDataDir)},
	} {
		if err := set(component, fields); err != nil {
			return "", err
		}
	}
	if data, err = yaml.Marshal(config); err != nil {
		return "", err
	}
	if err := os.WriteFile(configPath, data, 0o644); err != nil {
		return "", err
	}
	// Booted machines' processes are visible from the host in their own PID namespaces; the audits
	// read only this namespace's processes, ours.
	psHere := filepath.Join(dst, "ps-here")
	if err := os.WriteFile(psHere, []byte(psHereScript), 0o755); err != nil {
		return "", err
	}
	for _, file := range []string{"master.yaml", "etcd.yaml"} {
		checks := filepath.Join(dst, CISBenchmark, file)
		data, err := os.ReadFile(checks)
		if err != nil {
			return "", err
		}
		rewritten := strings.ReplaceAll(string(data), "/bin/ps -ef", psHere)
		rewritten = strings.ReplaceAll(rewritten, machine.KubeDir+"/", onAPIServer(machine.KubeDir)+"/")
		if err := os.WriteFile(checks, []byte(rewritten), 0o644); err != nil {
			return "", err
		}
	}
	return dst, nil
}

// psHereScript prints `ps -ef` for the processes of the caller's PID namespace only.
const psHereScript = `#!/bin/sh
exec /bin/ps -f -p "$(/usr/bin/pgrep -d, --ns $$ --nslist pid '')"
`
