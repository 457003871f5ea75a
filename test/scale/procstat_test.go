package scale

import (
	"os"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/test/procfs"
)

func TestUsageSumsAComponentsProcesses(t *testing.T) {
	self := os.Getpid()
	start, began := selfCPU(t), time.Now()
	m := NewUsageMeter([]Process{{Component: "a", PID: self}, {Component: "a", PID: self}, {Component: "gone", PID: 1 << 30}})
	// Spin until this process has used 300 ms of CPU, however loaded the machine is.
	for selfCPU(t)-start < 300*time.Millisecond {
	}
	m.Sample()
	ownCores := (selfCPU(t) - start).Seconds() / time.Since(began).Seconds()
	u := m.Usage()
	if len(u) != 1 || u[0].Component != "a" || u[0].Processes != 2 {
		t.Fatalf("usage %+v, want component a of 2 processes (a process that never answered is left out)", u)
	}
	// Twice what getrusage says of the same span; /proc counts in 10 ms ticks.
	if want := 2 * ownCores; u[0].CPUCores < 0.8*want || u[0].CPUCores > 1.2*want {
		t.Errorf("usage %+v: this process counted twice is %.2f cores by getrusage", u[0], want)
	}
	if u[0].RSSBytes <= 0 || u[0].PeakRSSBytes < u[0].RSSBytes {
		t.Errorf("usage %+v: no resident memory, or a peak below it", u[0])
	}
}

func selfCPU(t *testing.T) time.Duration {
	d, err := procfs.SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
