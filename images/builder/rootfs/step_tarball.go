package rootfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// stepTarball writes the root as a tarball (numeric owners, extended attributes and capabilities
// kept), reporting progress every 10 s.
type stepTarball struct{}

func (s *stepTarball) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	c := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("mount_path").(string)
	ui.Say("writing " + c.Output)
	start := time.Now()
	tmp := c.Output + ".tmp"
	tar := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls",
		"-C", root, "-cf", tmp, ".")
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Second):
				if st, err := os.Stat(tmp); err == nil {
					ui.Message(fmt.Sprintf("... %d MiB written (%.0f s)", st.Size()>>20, time.Since(start).Seconds()))
				}
			}
		}
	}()
	out, err := tar.CombinedOutput()
	close(stop)
	if err != nil {
		os.Remove(tmp)
		return halt(state, ui, fmt.Errorf("tar: %v: %s", err, out))
	}
	if err := os.Rename(tmp, c.Output); err != nil {
		return halt(state, ui, err)
	}
	st, _ := os.Stat(c.Output)
	ui.Say(fmt.Sprintf("wrote %s (%d MiB) in %.1f s", c.Output, st.Size()>>20, time.Since(start).Seconds()))
	return multistep.ActionContinue
}

func (s *stepTarball) Cleanup(multistep.StateBag) {}
