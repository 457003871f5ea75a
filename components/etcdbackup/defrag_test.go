package etcdbackup

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/clusterforge/clusterforge/test/toolchain"
)

// A pass needs the gate open, shrinks a member whose database is mostly free, and leaves one
// that would free little alone.
func TestRealEtcdDefragmentFreesWhatIsWorthIt(t *testing.T) {
	ctx := context.Background()
	cli, endpoint, _ := startEtcd(t, toolchain.Binary(t, "bin/etcd"), t.TempDir(), "original")
	store, registry := azurite(t, "cf-test/etcd-main")
	policy := DefragPolicy{MinFreeBytes: 8 << 20, MinFreeShare: 0.5}
	if _, err := Defragment(ctx, cli, store, time.Hour, policy); err == nil || !strings.Contains(err.Error(), "no verified snapshot") {
		t.Fatalf("a pass without a verified snapshot answered %v, want the gate's refusal", err)
	}
	value := strings.Repeat("x", 100<<10)
	for i := range 300 {
		put(t, cli, fmt.Sprintf("/registry/configmaps/big/%d", i), value)
	}
	resp, err := cli.Delete(ctx, "/registry/configmaps/big/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// bbolt hands the compacted pages back when a later write transaction begins and no older read
	// holds them (on a busy machine one may): write, as a live cluster does, until the member counts
	// them free.
	waitFor(t, "the compacted pages to be free", func() (int64, bool) {
		put(t, cli, "/registry/leases/tick", "x")
		s, err := cli.Status(ctx, endpoint)
		if err != nil {
			return 0, false
		}
		return s.DbSizeInUse, float64(s.DbSize-s.DbSizeInUse) >= policy.MinFreeShare*float64(s.DbSize)
	})
	agent := &Agent{Etcd: cli, Endpoint: endpoint, Store: store, Registry: registry, Interval: time.Hour, Retention: DefaultRetention(), Log: log.New(io.Discard, "", 0)}
	if _, err := agent.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	steps, err := Defragment(ctx, cli, store, time.Hour, policy)
	if err != nil || len(steps) != 1 || steps[0].Skipped != "" || !steps[0].Leader || steps[0].After > steps[0].Before/2 {
		t.Fatalf("pass over a mostly free database: %v, %v; want the leader shrunk to half or less", steps, err)
	}
	t.Logf("%s", steps[0])
	steps, err = Defragment(ctx, cli, store, time.Hour, policy)
	if err != nil || len(steps) != 1 || steps[0].Skipped == "" {
		t.Fatalf("second pass: %v, %v; want the member skipped", steps, err)
	}
}
