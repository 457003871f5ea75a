// Command packer-plugin-clusterforge is the Packer plugin that turns a base machine into a
// clusterforge worker node: `provisioner "clusterforge-node"`.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/clusterforge/clusterforge/images/provisioner/node"
	"github.com/clusterforge/clusterforge/images/version"
)

func main() {
	pps := plugin.NewSet()
	pps.RegisterProvisioner("node", new(node.Provisioner))
	pps.SetVersion(version.PluginVersion)
	if err := pps.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
		os.Exit(1)
	}
}
