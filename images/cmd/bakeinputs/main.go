// Command bakeinputs answers scripts/image.sh what a bake reads, from the packages that decide it:
//
//	bakeinputs binaries ROLE   the binaries ROLE's image installs from binaries_dir, one a line
//	                           (machine.ImageBinaries): what the image cache's key hashes
//	bakeinputs fixture DIR     an empty file for each of them in DIR/<role>/: `packer validate` runs
//	                           every provisioner's Prepare, which checks binaries_dir holds them, so
//	                           the fast tier validates the templates before any of them is built
//	bakeinputs addons STACK    the add-on binaries a worker bake's preload images hold, as paths
//	                           under .tools (addons.BuiltImages)
//	bakeinputs tags ROLE STACK the version_tags variable of a publish of ROLE for STACK, in HCL:
//	                           the releases the image carries (machine.ImageTags), which the
//	                           template puts on the gallery image version
//	bakeinputs archive         the Debian archive's release file a local bake installs from
//	                           (its InRelease URL): a new point release changes the cache's key
package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

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
	case len(args) == 3 && args[0] == "tags":
		if !slices.Contains(machine.ImageRoles, args[1]) {
			return fmt.Errorf("no image role %q; roles: %v", args[1], machine.ImageRoles)
		}
		cluster, err := spec.LoadStack(args[2])
		if err != nil {
			return err
		}
		tags := machine.ImageTags(cluster.Versions, args[1])
		fmt.Println("version_tags = {")
		for _, k := range slices.Sorted(maps.Keys(tags)) {
			fmt.Printf("  %q = %q\n", k, tags[k])
		}
		fmt.Println("}")
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
