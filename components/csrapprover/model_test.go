package csrapprover

import (
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
)

// A scale set whose model the cluster did not write gets no joins or renewals: an upgrade policy
// that would carry a model to the running instances, an extension, a foreign image.
func TestScaleSetModelsTheClusterDidNotWrite(t *testing.T) {
	const def = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/images/providers/Microsoft.Compute/galleries/fleet/images/worker-cpu"
	w := &WorkerInstances{Images: []string{def, ""}}
	model := func(mode armcompute.UpgradeMode, image string, extensions ...string) *armcompute.VirtualMachineScaleSet {
		ss := &armcompute.VirtualMachineScaleSet{Name: to.Ptr("cf-dev-cpu"), Properties: &armcompute.VirtualMachineScaleSetProperties{
			UpgradePolicy: &armcompute.UpgradePolicy{Mode: to.Ptr(mode)},
			VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{
				StorageProfile:   &armcompute.VirtualMachineScaleSetStorageProfile{ImageReference: &armcompute.ImageReference{ID: to.Ptr(image)}},
				ExtensionProfile: &armcompute.VirtualMachineScaleSetExtensionProfile{}}}}
		for _, e := range extensions {
			ss.Properties.VirtualMachineProfile.ExtensionProfile.Extensions = append(ss.Properties.VirtualMachineProfile.ExtensionProfile.Extensions,
				&armcompute.VirtualMachineScaleSetExtension{Name: to.Ptr(e)})
		}
		return ss
	}
	for _, tc := range []struct {
		name   string
		ss     *armcompute.VirtualMachineScaleSet
		refuse string
	}{
		{"the cluster's model", model(armcompute.UpgradeModeManual, def+"/versions/1.0.0"), ""},
		{"automatic upgrades", model(armcompute.UpgradeModeAutomatic, def+"/versions/1.0.0"), "upgrade policy is Automatic"},
		{"rolling upgrades", model(armcompute.UpgradeModeRolling, def+"/versions/1.0.0"), "upgrade policy is Rolling"},
		{"an extension", model(armcompute.UpgradeModeManual, def+"/versions/1.0.0", "CustomScript"), "runs 1 extensions"},
		{"another gallery's image", model(armcompute.UpgradeModeManual, strings.Replace(def, "fleet", "other", 1)+"/versions/1.0.0"), "boots image"},
		{"an image with no id", model(armcompute.UpgradeModeManual, ""), "boots image"},
	} {
		err := w.ourScaleSetModel(tc.ss)
		if (err == nil) != (tc.refuse == "") || err != nil && !strings.Contains(err.Error(), tc.refuse) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.refuse)
		}
	}
}
