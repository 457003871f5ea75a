package rootfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// stepDebootstrap makes the Debian root next to the output tarball and removes it on cleanup.
type stepDebootstrap struct{ root string }

func (s *stepDebootstrap) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	c := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	s.root = c.Output + ".root"
	if err := removeRoot(s.root); err != nil {
		return halt(state, ui, err)
	}
	if err := os.MkdirAll(c.CacheDir, 0o755); err != nil {
		return halt(state, ui, fmt.Errorf("cache_dir: %w", err))
	}
	args := []string{"--variant=minbase", "--include=" + strings.Join(c.Packages, ","),
		"--cache-dir=" + c.CacheDir, c.Suite, s.root, c.Mirror}
	ui.Say(fmt.Sprintf("debootstrap %s into %s (%d extra packages)", c.Suite, s.root, len(c.Packages)))
	if err := runStreaming(ctx, ui, exec.CommandContext(ctx, "debootstrap", args...)); err != nil {
		return halt(state, ui, fmt.Errorf("debootstrap: %w", err))
	}
	// The Debian 12 cloud images' locale, which cloud-init's locale module keeps; without it the
	// module generates en_US.UTF-8, which Debian's locale-gen cannot do from an argument.
	if err := os.WriteFile(filepath.Join(s.root, "etc/default/locale"), []byte("LANG=C.UTF-8\n"), 0o644); err != nil {
		return halt(state, ui, err)
	}
	state.Put("mount_path", s.root)
	return multistep.ActionContinue
}

func (s *stepDebootstrap) Cleanup(state multistep.StateBag) {
	if err := removeRoot(s.root); err != nil {
		state.Get("ui").(packersdk.Ui).Error(err.Error())
	}
}

// removeRoot deletes a root directory without crossing into anything still mounted below it
// (a bind-mounted /dev above all).
func removeRoot(root string) error {
	if root == "" {
		return nil
	}
	if out, err := exec.Command("rm", "-rf", "--one-file-system", root).CombinedOutput(); err != nil {
		return fmt.Errorf("remove %s: %v: %s", root, err, out)
	}
	return nil
}

func halt(state multistep.StateBag, ui packersdk.Ui, err error) multistep.StepAction {
	state.Put("error", err)
	ui.Error(err.Error())
	return multistep.ActionHalt
}
