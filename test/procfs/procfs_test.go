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
	if s.Comm != "procfs.test" || s.State != "R" {
		t.Errorf("name %q, state %q: want procfs.test, running", s.Comm, s.State)
	}
}
