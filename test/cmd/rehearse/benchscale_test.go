package main

import (
	"strings"
	"testing"
	"time"
)

// --cpu takes role=cores for the capacity topology's roles; anything else names the flag.
func TestParseCPU(t *testing.T) {
	got, err := parseCPU("apiserver=1.5, etcd-main=0.5")
	if err != nil || len(got) != 2 || got["apiserver"] != 1.5 || got["etcd-main"] != 0.5 {
		t.Errorf("parseCPU: %v, %v", got, err)
	}
	if got, err := parseCPU(""); got != nil || err != nil {
		t.Errorf("empty: %v, %v; want the topology's defaults (nil)", got, err)
	}
	for _, bad := range []string{"kwok=1", "apiserver", "apiserver=0", "apiserver=lots", "apiserver=1;rm -rf /"} {
		if _, err := parseCPU(bad); err == nil || !strings.Contains(err.Error(), "--cpu") {
			t.Errorf("parseCPU(%q): %v, want an error naming --cpu", bad, err)
		}
	}
}

// A flush cannot take negative time: --etcd-fsync says so, where 0 keeps the topology's default.
func TestOptionsRefuseANegativeFsync(t *testing.T) {
	if _, err := (benchFlags{out: t.TempDir(), etcdFsync: -time.Millisecond}).options(); err == nil || !strings.Contains(err.Error(), "--etcd-fsync") {
		t.Errorf("--etcd-fsync=-1ms: %v, want an error naming --etcd-fsync", err)
	}
	if _, err := (benchFlags{out: t.TempDir()}).options(); err != nil {
		t.Errorf("--etcd-fsync unset: %v", err)
	}
}

// Every verb shares one flag set: two flags of one name panic before any verb runs, which the
// build does not catch (a boot's flag once took the scale benchmark's name).
func TestFlagsParse(t *testing.T) {
	if err := run([]string{"no-such-verb", "--stack=dev"}); err == nil || !strings.Contains(err.Error(), `unknown verb "no-such-verb"`) {
		t.Errorf("an unknown verb: %v, want it named", err)
	}
}
