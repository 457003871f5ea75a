package rootfs

import (
	"bytes"
	"context"
	"testing"

	"github.com/hashicorp/packer-plugin-sdk/chroot"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/clusterforge/clusterforge/test/tier"
)

// Variables and command substitutions are expanded by the shell inside the root, and the exit
// status comes back.
func TestAsRootCommunicatorRunsTheCommandInsideTheRoot(t *testing.T) {
	tier.Root(t)
	comm := &communicator{chroot.Communicator{Chroot: "/"}}
	var out bytes.Buffer
	cmd := &packersdk.RemoteCmd{Command: `x=inside; echo "$x $(echo sub)"; exit 3`, Stdout: &out}
	if err := comm.Start(context.Background(), cmd); err != nil {
		t.Fatal(err)
	}
	if status := cmd.Wait(); status != 3 {
		t.Errorf("exit status %d, want 3", status)
	}
	if got := out.String(); got != "inside sub\n" {
		t.Errorf("output %q, want %q", got, "inside sub\n")
	}
}
