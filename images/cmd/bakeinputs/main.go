// Command bakeinputs answers scripts/image.sh what a bake reads, from the packages that decide it:
//
//	bakeinputs binaries ROLE   the binaries ROLE's image installs from binaries_dir, one a line
//	                           (machine.ImageBinaries): what the image cache's key hashes
//	bakeinputs fixture DIR     an empty file for each of them in DIR/<role>/: `packer validate` runs
//	                           every provisioner's Prepare, which checks binaries_dir holds them, so
//	                           the fast tier validates the templates before any of them is built
//	bakeinputs addons STACK    the add-on binaries a worker bake's preload images hold, as paths
//	                           under .tools (addons.BuiltImages)
//	bakeinputs archive         the Debian archive's release file a local bake installs from
//	                           (its InRelease URL): a new point release changes the cache's key
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/images/builder/rootfs"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bakeinputs:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "binaries":
		binaries, ok := machine.ImageBinaries[args[1]]
		if !ok {
			return fmt.Errorf("no image role %q; roles: %v", args[1], machine.ImageRoles)
		}
		for _, b := range binaries {
			fmt.Println(b)
		}
	case len(args) == 2 && args[0] == "fixture":
		for role, binaries := range machine.ImageBinaries {
			dir := filepath.Join(args[1], role)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			for _, b := range binaries {
				if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
					return err
				}
			}
		}
	case len(args) == 2 && args[0] == "addons":
		cluster, err := spec.LoadStack(args[1])
		if err != nil {
			return err
		}
		for _, b := range addons.BuiltImages(cluster) {
			fmt.Println(b.Binary)
		}
	case len(args) == 1 && args[0] == "archive":
		fmt.Printf("%s/dists/%s/InRelease\n", rootfs.DefaultMirror, rootfs.DefaultSuite)
	default:
		return fmt.Errorf("usage: bakeinputs binaries ROLE | fixture DIR | addons STACK | archive")
	}
	return nil
}
