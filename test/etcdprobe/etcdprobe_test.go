package etcdprobe

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The probe process appends a line a write; the reader takes whole lines only, and the rest of
// a line still being written on a later call.
func TestProbeReadsWholeLinesAsTheyAreAppended(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probe.jsonl")
	start := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	var lines []byte
	for i := range 3 {
		line, err := json.Marshal(Sample{At: start.Add(time.Duration(i) * 100 * time.Millisecond), Latency: time.Duration(i+1) * time.Millisecond, Failed: i == 2})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(append(lines, line...), '\n')
	}
	cut := len(lines) - 7 // the third line half written
	if err := os.WriteFile(path, lines[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	p := Read(path)
	all := func() []Sample { return p.Between(start, start.Add(time.Second)) }
	if got := all(); len(got) != 2 || got[1].Latency != 2*time.Millisecond {
		t.Fatalf("with two whole lines and half of the third: %+v, want the two", got)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(lines[cut:]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := all()
	if len(got) != 3 || !got[2].Failed || got[2].Latency != 3*time.Millisecond {
		t.Fatalf("after the third line was finished: %+v, want three, the last failed", got)
	}
	if got := p.Between(start.Add(100*time.Millisecond), start.Add(200*time.Millisecond)); len(got) != 1 {
		t.Errorf("samples sent in [100 ms, 200 ms): %+v, want the second", got)
	}
	if err := p.Err(); err != nil {
		t.Error(err)
	}
}
