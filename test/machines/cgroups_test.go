package machines

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/test/procfs"
	"github.com/clusterforge/clusterforge/test/tier"
)

// A process started in cgroups capped at 0.3 cores is capped there, as the kernel tells.
func TestAsRootLimitCPUCapsTheProcessesStartedInTheCgroups(t *testing.T) {
	tier.Root(t)
	top := fmt.Sprintf("cftest-%d", os.Getpid())
	dirs, err := MakeCgroups(top, "role")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := RemoveCgroups(top); err != nil {
			t.Error(err)
		}
	}()
	if err := LimitCPU(dirs, 0.3); err != nil {
		t.Fatal(err)
	}
	argv := InCgroups(dirs, []string{"sleep", "30"})
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if s, err := procfs.Read(cmd.Process.Pid); err == nil && s.Comm == "sleep" {
			break
		}
	}
	if cores, ok := procfs.CPULimit(cmd.Process.Pid); !ok || cores != 0.3 {
		t.Errorf("the process's CPU limit is %v (set: %v), want 0.3 cores", cores, ok)
	}
	if _, ok := procfs.CPULimit(os.Getpid()); ok {
		t.Errorf("this test's own process is capped too")
	}
	// A busy loop spends each 100 ms period's 30 ms early and is throttled for the rest.
	busyArgv := InCgroups(dirs, []string{"sh", "-c", "while :; do :; done"})
	busy := exec.Command(busyArgv[0], busyArgv[1:]...)
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	time.Sleep(time.Second)
	if periods, throttled, ok := procfs.Throttling(busy.Process.Pid); !ok || periods < 5 || throttled*2 < periods {
		t.Errorf("busy loop at 0.3 cores: throttled in %d of %d periods (%v), want most", throttled, periods, ok)
	}
}
