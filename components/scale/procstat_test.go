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
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	rusage := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	m := NewUsageMeter([]Process{{Component: "a", PID: self}, {Component: "a", PID: self}, {Component: "gone", PID: 1 << 30}})
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
	}
	m.Sample()
	u := m.Usage()
	if len(u) != 1 || u[0].Component != "a" || u[0].Processes != 2 {
		t.Fatalf("usage %+v, want component a of 2 processes (a process that never answered is left out)", u)
	}
	if u[0].CPUCores < 1 || u[0].CPUCores > 4 || u[0].RSSBytes <= 0 || u[0].PeakRSSBytes < u[0].RSSBytes {
		t.Errorf("usage %+v: this process counted twice while spinning is 2 cores", u[0])
	}
}
