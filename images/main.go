// Command packer-plugin-clusterforge is the Packer plugin that turns a base machine into a
// clusterforge worker node, `provisioner "clusterforge-node"`, and bakes one on this machine
// with no cloud: `source "clusterforge-rootfs"`.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/clusterforge/clusterforge/images/builder/rootfs"
	"github.com/clusterforge/clusterforge/images/provisioner/node"
	"github.com/clusterforge/clusterforge/images/version"
)

func main() {
	pps := plugin.NewSet()
	pps.RegisterBuilder("rootfs", new(rootfs.Builder))
	pps.RegisterProvisioner("node", new(node.Provisioner))
	pps.SetVersion(version.PluginVersion)
	if err := pps.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
		os.Exit(1)
	}
}
