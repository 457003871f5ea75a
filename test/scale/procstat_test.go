package scale

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ReadProc agrees with the kernel's other accounts of this process: getrusage for CPU time, ps
// for resident memory.
func TestReadProcAgreesWithGetrusageAndPs(t *testing.T) {
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); { // burn some CPU
	}
	s, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rusage := selfCPU(t)
	// /proc counts in 10 ms ticks, and other threads run between the two reads.
	if d := rusage - s.CPU; d < -20*time.Millisecond || d > 100*time.Millisecond {
		t.Errorf("CPU %v from /proc, %v from getrusage", s.CPU, rusage)
	}
	out, err := exec.Command("ps", "-o", "rss=", "-p", strconv.Itoa(os.Getpid())).Output()
	if err != nil {
		t.Fatal(err)
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if ps := kib << 10; s.RSSBytes < ps/2 || s.RSSBytes > ps*2 {
		t.Errorf("RSS %d bytes from /proc, %d from ps", s.RSSBytes, ps)
	}
}

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

// selfCPU is this process's CPU time by getrusage.
func selfCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
