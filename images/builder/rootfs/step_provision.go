package rootfs

import (
	"context"

	"github.com/hashicorp/packer-plugin-sdk/chroot"
	"github.com/hashicorp/packer-plugin-sdk/common"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	"github.com/hashicorp/packer-plugin-sdk/multistep/commonsteps"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// stepProvision runs the template's provisioners inside the root.
type stepProvision struct{}

func (s *stepProvision) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	ui := state.Get("ui").(packersdk.Ui)
	comm := &communicator{chroot.Communicator{
		Chroot:     state.Get("mount_path").(string),
		CmdWrapper: state.Get("wrappedCommand").(common.CommandWrapper),
	}}
	data := commonsteps.PopulateProvisionHookData(state)
	state.Put("generated_data", data)
	if err := state.Get("hook").(packersdk.Hook).Run(ctx, packersdk.HookProvision, ui, comm, data); err != nil {
		return halt(state, ui, err)
	}
	return multistep.ActionContinue
}

func (s *stepProvision) Cleanup(multistep.StateBag) {}
