package processes

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// Over a rehearsal applied before, what needs a roll keeps the machines as applied (make rehearse
// refuses it), what applies in place does not; a stack naming an older release asks for the
// toolchain group that builds it.
func TestRehearsalOverAnAppliedOne(t *testing.T) {
	load := func(edit func(*spec.Cluster)) *spec.Cluster {
		c, err := spec.LoadStack(filepath.Join("..", "..", "..", spec.StackDir, "Pulumi.dev.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		edit(c)
		return c
	}
	dir := t.TempDir()
	applied := load(func(*spec.Cluster) {})
	if changes, _ := PendingRoll(dir, applied); changes != nil {
		t.Fatalf("before a first start: %v", changes)
	}
	data, err := applied.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	l := &Layout{Layout: &machines.Layout{Options: machines.Options{Dir: dir}}}
	if err := os.WriteFile(l.appliedFile(), data, 0o644); err != nil {
		t.Fatal(err)
	}
	older := load(func(c *spec.Cluster) {
		c.Versions.Kubernetes, c.Versions.Kubelet = spec.PreviousKubernetesVersion, spec.PreviousKubernetesVersion
	})
	changes, was := PendingRoll(dir, older)
	if len(changes) != 2 || changes[0].Field != "versions.kubelet" || changes[1].Field != "versions.kubernetes" || was == nil || was.Versions.Kubernetes != spec.DefaultKubernetesVersion {
		t.Errorf("an older Kubernetes over an applied rehearsal: %v, runs %v", changes, was)
	}
	hop := load(func(c *spec.Cluster) {
		c.Versions.Kubernetes, c.Versions.Kubelet = spec.HopKubernetesVersion, spec.HopKubernetesVersion
	})
	if got := Releases(hop.Versions); !slices.Equal(got, []string{HopReleases}) {
		t.Errorf("a stack on %s needs toolchain groups %v, want %s", spec.HopKubernetesVersion, got, HopReleases)
	}
	if got := Releases(older.Versions); !slices.Equal(got, []string{UpgradeReleases}) {
		t.Errorf("a stack on %s needs toolchain groups %v, want %s", spec.PreviousKubernetesVersion, got, UpgradeReleases)
	}
	if got := Releases(applied.Versions); got != nil {
		t.Errorf("a stack on the pinned releases needs toolchain groups %v", got)
	}
	inPlace := load(func(c *spec.Cluster) { c.Pools[0].MaxNodes-- })
	if changes, was := PendingRoll(dir, inPlace); changes != nil || was != nil {
		t.Errorf("an in-place change: %v", changes)
	}
}
