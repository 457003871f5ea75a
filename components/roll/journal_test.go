package roll

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

func cluster(t *testing.T, edit func(*spec.Cluster)) *spec.Cluster {
	t.Helper()
	c, err := spec.LoadStack(filepath.Join("..", "..", spec.StackDir, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	edit(c)
	return c
}

// An interrupted roll resumes from its journal; a journal of a roll toward another spec is
// refused rather than mixed into this one.
func TestJournalResumesOnlyItsOwnRoll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "roll.json")
	applied := cluster(t, func(*spec.Cluster) {})
	r := &Roller{Applied: applied, Desired: cluster(t, func(c *spec.Cluster) { c.EtcdMain.VMSize = "Standard_E2ds_v5" }), Journal: path}
	j, err := r.openJournal()
	if err != nil || len(j.Done) != 0 {
		t.Fatalf("a new journal: %v %v", j, err)
	}
	j.Done = append(j.Done, "cf-dev-etcd-main-0", "cf-dev-etcd-main-1")
	if err := j.save(path); err != nil {
		t.Fatal(err)
	}
	again, err := r.openJournal()
	if err != nil || !slices.Equal(again.Done, j.Done) {
		t.Fatalf("resumed journal %v, err %v; want %v", again, err, j.Done)
	}
	other := &Roller{Applied: applied, Desired: cluster(t, func(c *spec.Cluster) { c.EtcdMain.VMSize = "Standard_E4ds_v5" }), Journal: path}
	if _, err := other.openJournal(); err == nil || !strings.Contains(err.Error(), "another spec (2 machines replaced)") {
		t.Fatalf("a journal of another roll: %v", err)
	}
}
