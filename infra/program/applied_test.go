package program

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
)

// A roll step is honoured while it is valid; once lapsed (a roll stopped there) the run is a
// plain `pulumi up`, which cannot replace an etcd VM; a value not set by a roll is refused.
func TestRollStepLapses(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	value := RollStep(RollMember+"cf-dev-etcd-main-0", now)
	for _, tc := range []struct {
		at     time.Time
		value  string
		step   string
		lapsed bool
		fails  bool
	}{
		{now.Add(time.Minute), value, RollMember + "cf-dev-etcd-main-0", false, false},
		{now.Add(rollStepLifetime + time.Second), value, "", true, false},
		{now, "", "", false, false},
		{now, RollMember + "cf-dev-etcd-main-0", "", false, true},
	} {
		step, lapsed, err := activeStep(tc.value, tc.at)
		if step != tc.step || lapsed != tc.lapsed || (err != nil) != tc.fails {
			t.Errorf("%q at %s: step %q lapsed %v err %v; want %q %v, failing %v", tc.value, tc.at, step, lapsed, err, tc.step, tc.lapsed, tc.fails)
		}
	}
}

// A first apply may not hold workers: versions.kubelet older than the control plane describes
// what a running cluster's workers run, which a new one has none of.
func TestNewClusterCannotHoldWorkers(t *testing.T) {
	c, err := spec.LoadStack(filepath.Join("..", "..", spec.StackDir, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guard("dev", nil, c, ""); err != nil {
		t.Errorf("a new cluster on the pinned releases: %v", err)
	}
	c.Versions.Kubelet = spec.PreviousKubernetesVersion
	if _, err := guard("dev", nil, c, ""); err == nil || !strings.Contains(err.Error(), "versions.kubelet") {
		t.Errorf("a new cluster with held workers: %v, want refused on versions.kubelet", err)
	}
	if _, err := guard("dev", c, c, ""); err != nil {
		t.Errorf("a running cluster keeping its held workers: %v", err)
	}
}
