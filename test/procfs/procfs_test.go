package procfs

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Read agrees with the kernel's other accounts of this process: getrusage for CPU time, ps
// for resident memory.
func TestReadAgreesWithGetrusageAndPs(t *testing.T) {
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); { // burn some CPU
	}
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rusage, err := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
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
	if peak := PeakRSS(os.Getpid()); peak < s.RSSBytes/2 {
		t.Errorf("peak RSS %d bytes below the resident %d", peak, s.RSSBytes)
	}
	if s.Comm != "procfs.test" {
		t.Errorf("name %q, want procfs.test", s.Comm)
	}
	// This process's state is its main thread's, which may sleep while another thread reads: a
	// child known to sleep gives a state to compare.
	sleeper := exec.Command("sleep", "10")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	var child Sample
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if child, err = Read(sleeper.Process.Pid); err == nil && child.Comm == "sleep" && child.State == "S" {
			return
		}
	}
	t.Errorf("sleep's child: %+v (%v), want name sleep, state S", child, err)
}
