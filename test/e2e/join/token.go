package join

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines/nspawn"
)

// Once a worker's kubelet holds its client certificate, the join token is on none of its files
// (but the test's NoCloud seed, deviation "cloud-init datasource"), and the kubelet restarts
// without it: the node's lease is renewed after the restart.
func JoinTokenLeavesTheWorkers(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	workers := framework.WorkerNames()
	for _, w := range workers {
		_, secret, _ := strings.Cut(pki.JoinToken(framework.Booted.Bundle.JoinSeed, poolOf(t, w)), ".")
		// containerd's store holds images only; the seed is the test's datasource.
		search := "grep -rlF -e " + machine.ShellQuote(secret) + " /etc /var /run /root /home --exclude-dir=containerd 2>/dev/null | grep -v '^" + nspawn.CloudInitSeed + "/' || true"
		if err := drills.WaitUntil(2*time.Minute, func() error {
			found, err := framework.Booted.Exec(ctx, w, "sh", "-c", search)
			if err != nil {
				return err
			}
			if found = strings.TrimSpace(found); found != "" {
				return fmt.Errorf("%s still holds the join token in %s", w, strings.ReplaceAll(found, "\n", ", "))
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	}

	cs := drills.Clientset(t, framework.Booted)
	restarted := time.Now()
	if _, err := framework.Booted.Exec(ctx, workers[0], "systemctl", "restart", machine.KubeletUnit); err != nil {
		t.Fatal(err)
	}
	if err := drills.WaitUntil(2*time.Minute, func() error {
		lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, workers[0], metav1.GetOptions{})
		if err != nil {
			return err
		}
		if renewed := lease.Spec.RenewTime; renewed == nil || renewed.Time.Before(restarted) {
			return fmt.Errorf("%s's lease was last renewed %v, before its kubelet restarted", workers[0], renewed)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}
