package rootfs

import (
	"context"

	"github.com/hashicorp/packer-plugin-sdk/chroot"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// stepUnmount undoes the chroot mounts before the tarball is written, so it holds the image only.
type stepUnmount struct{}

func (s *stepUnmount) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	ui := state.Get("ui").(packersdk.Ui)
	if err := state.Get("mount_extra_cleanup").(chroot.Cleanup).CleanupFunc(state); err != nil {
		return halt(state, ui, err)
	}
	return multistep.ActionContinue
}

func (s *stepUnmount) Cleanup(multistep.StateBag) {}
