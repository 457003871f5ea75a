package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/dataplane"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/nspawn"
)

// drillQuota is the etcd-events quota during the NOSPACE drill: small enough to fill in seconds.
const drillQuota = 16 << 20

// quotaFlag is etcd's quota flag in a rendered unit.
var quotaFlag = regexp.MustCompile(`--quota-backend-bytes=[0-9]+`)

// The NOSPACE drill on booted machines (L04): the etcd-events members restart one by one with a
// tiny quota (a drop-in over the rendered unit, as an operator would test an alert), writes fill
// it until etcd raises NOSPACE, and Prometheus, running on a worker, fires EtcdNoSpace from its
// own rule evaluation, read from its alerts API. scripts/etcd-nospace-recover.sh then brings
// writes back, and the members return to their rendered quota.
func PrometheusFiresEtcdNoSpaceDuringTheDrill(t *testing.T) {
	cl, _ := dataplane.SharedClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	role := spec.RoleEtcdEvents
	members := framework.Booted.Of(role)
	dropIn := filepath.Join(machine.UnitDir, "etcd.service.d", "90-drill-quota.conf")
	setQuota := func(ctx context.Context, quota int64) {
		t.Helper()
		for _, in := range members {
			m, err := framework.Booted.Machine(in.Name)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(m.Root, dropIn)
			if quota == 0 {
				err = os.RemoveAll(path)
			} else {
				err = writeQuotaDropIn(m.Root, path, quota)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, cmd := range [][]string{{"systemctl", "daemon-reload"}, {"systemctl", "restart", "etcd.service"}} {
				if _, err := framework.Booted.Exec(ctx, in.Name, cmd...); err != nil {
					t.Fatal(err)
				}
			}
			if err := framework.Booted.WaitEtcdHealthy(ctx, role); err != nil {
				t.Fatal(err)
			}
		}
	}
	setQuota(ctx, drillQuota)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		setQuota(ctx, 0)
	})

	cli, err := framework.Booted.EtcdClient(role)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	blob := make([]byte, 512<<10)
	raised := false
	for i := 0; i < 200 && !raised; i++ {
		_, _ = rand.Read(blob)
		if _, err := cli.Put(ctx, "/drill/blob", string(blob)); err != nil {
			if !strings.Contains(err.Error(), "database space exceeded") {
				t.Fatalf("put %d: %v, want NOSPACE", i, err)
			}
			raised = true
		}
	}
	if !raised {
		t.Fatal("200 puts of 512 KiB never raised NOSPACE")
	}

	prom := dataplane.AddOnPods(t, addons.MonitoringNamespace, "app="+addons.PrometheusName)
	var alertsURL string
	for _, p := range prom {
		alertsURL = "http://" + net.JoinHostPort(p.Status.PodIP, "9090") + "/api/v1/alerts"
	}
	hc := dataplane.HTTPFrom(cl[0], nil)
	err = drills.WaitUntil(3*time.Minute, func() error {
		resp, err := hc.Get(alertsURL)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var alerts struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string
					State  string
				}
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
			return err
		}
		for _, a := range alerts.Data.Alerts {
			if a.Labels["alertname"] == "EtcdNoSpace" && a.Labels["etcd_cluster"] == role && a.State == "firing" {
				return nil
			}
		}
		return fmt.Errorf("no firing EtcdNoSpace for %s: %+v", role, alerts.Data.Alerts)
	})
	if err != nil {
		t.Error(err)
	}

	// The runbook's recovery, from inside the network the members are on.
	dir := t.TempDir()
	env := []string{"ETCDCTL=" + filepath.Join(framework.RepoRoot, ".tools", "bin", "etcdctl")}
	var endpoints []string
	for _, in := range members {
		endpoints = append(endpoints, machines.EtcdClientURL(in))
	}
	env = append(env, "ETCDCTL_ENDPOINTS="+strings.Join(endpoints, ","))
	for variable, file := range map[string]string{
		"ETCDCTL_CACERT": writePEM(t, dir, "ca.crt", framework.Booted.Bundle.Pair(pki.EtcdCA(role)).CertPEM),
		"ETCDCTL_CERT":   writePEM(t, dir, "client.crt", framework.Booted.Bundle.Pair(pki.APIServerEtcdClient).CertPEM),
		"ETCDCTL_KEY":    writePEM(t, dir, "client.key", framework.Booted.Bundle.Pair(pki.APIServerEtcdClient).KeyPEM),
	} {
		env = append(env, variable+"="+file)
	}
	recover := exec.CommandContext(ctx, "ip", "netns", "exec", nspawn.Hub(framework.Stack()+"-check"), filepath.Join(framework.RepoRoot, "scripts", "etcd-nospace-recover.sh"))
	recover.Env = append(os.Environ(), env...)
	if out, err := recover.CombinedOutput(); err != nil {
		t.Fatalf("scripts/etcd-nospace-recover.sh: %v\n%s", err, out)
	}
	if _, err := cli.Put(ctx, "/drill/small", "x"); err != nil {
		t.Errorf("write after the recovery: %v", err)
	}
}

// writeQuotaDropIn writes a drop-in that runs the machine's rendered etcd with another quota.
func writeQuotaDropIn(root, path string, quota int64) error {
	unit, err := os.ReadFile(filepath.Join(root, machine.UnitDir, "etcd.service"))
	if err != nil {
		return err
	}
	var exec []string
	in := false
	for _, line := range strings.Split(string(unit), "\n") {
		if strings.HasPrefix(line, "ExecStart=") {
			in = true
		}
		if in {
			exec = append(exec, line)
			if !strings.HasSuffix(line, "\\") {
				break
			}
		}
	}
	block := strings.Join(exec, "\n")
	if !quotaFlag.MatchString(block) {
		return fmt.Errorf("%s: no --quota-backend-bytes in etcd's ExecStart", root)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	content := "[Service]\nExecStart=\n" + quotaFlag.ReplaceAllString(block, fmt.Sprintf("--quota-backend-bytes=%d", quota)) + "\n"
	return os.WriteFile(path, []byte(content), 0o644)
}

func writePEM(t *testing.T, dir, name, pem string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
