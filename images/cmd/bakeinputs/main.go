// Command bakeinputs answers scripts/image.sh what a bake reads, from the packages that decide it:
//
//	bakeinputs binaries ROLE   the binaries ROLE's image installs from binaries_dir, one a line
//	                           (machine.ImageBinaries): what the image cache's key hashes
//	bakeinputs fixture DIR     an empty file for each of them in DIR/<role>/: `packer validate` runs
//	                           every provisioner's Prepare, which checks binaries_dir holds them, so
//	                           the fast tier validates the templates before any of them is built;
//	                           and DIR/preload.pkrvars.json, a publish's preload list for the pause
//	                           image alone (pulled by its pinned digest)
//	bakeinputs addons STACK    the add-on binaries a worker bake's preload images hold, as paths
//	                           under .tools (addons.BuiltImages)
//	bakeinputs publish -role ROLE -stack STACK -version V [-gallery ID] -binaries DIR [-preload FILE] -out FILE
//	                           the variable file (JSON) of `packer build` publishing ROLE's image for
//	                           STACK (images/publish), version_tags among them (the releases the
//	                           image carries); prints the stack lines that boot it
//	bakeinputs archive         the Debian archive's release file a local bake installs from
//	                           (its InRelease URL): a new point release changes the cache's key
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/images/builder/rootfs"
	"github.com/clusterforge/clusterforge/images/ociimage"
	"github.com/clusterforge/clusterforge/images/publish"
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
		if err := os.MkdirAll(args[1], 0o755); err != nil {
			return err
		}
		pause := ociimage.Preload{Name: spec.DefaultPauseImage, Digest: spec.DefaultPauseImageDigest}
		if err := ociimage.WritePreloadVars(filepath.Join(args[1], ociimage.PreloadVarsFile), ociimage.PreloadVars{PreloadImages: []ociimage.Preload{pause}}); err != nil {
			return err
		}
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
	case len(args) > 0 && args[0] == "publish":
		return publishVars(args[1:])
	case len(args) == 1 && args[0] == "archive":
		fmt.Printf("%s/dists/%s/InRelease\n", rootfs.DefaultMirror, rootfs.DefaultSuite)
	default:
		return fmt.Errorf("usage: bakeinputs binaries ROLE | fixture DIR | addons STACK | publish ... | archive")
	}
	return nil
}

func publishVars(args []string) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	var r publish.Request
	var preload, out string
	fs.StringVar(&r.Role, "role", "", "image role: "+strings.Join(machine.ImageRoles, " or "))
	fs.StringVar(&r.StackPath, "stack", "", "stack file")
	fs.StringVar(&r.Version, "version", "", "gallery image version to create, Major.Minor.Patch")
	fs.StringVar(&r.Gallery, "gallery", "", "the gallery's resource id; default: the gallery of the image the stack boots")
	fs.StringVar(&r.BinariesDir, "binaries", "", "the role's pinned binaries")
	fs.StringVar(&preload, "preload", "", "worker: the preload list images/cmd/mkimages wrote")
	fs.StringVar(&out, "out", "", "the variable file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if r.StackPath == "" || r.BinariesDir == "" || out == "" {
		return fmt.Errorf("publish: -stack, -binaries and -out are required")
	}
	var err error
	if r.Cluster, err = spec.LoadStack(r.StackPath); err != nil {
		return err
	}
	// The template runs in images/: every path it reads is absolute.
	if r.StackPath, err = filepath.Abs(r.StackPath); err != nil {
		return err
	}
	if r.BinariesDir, err = filepath.Abs(r.BinariesDir); err != nil {
		return err
	}
	if preload != "" {
		list, err := ociimage.ReadPreloadVars(preload)
		if err != nil {
			return err
		}
		r.Preload = &list
	}
	vars, err := publish.Vars(r)
	if err != nil {
		return err
	}
	lines, err := publish.StackLines(r)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(vars, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println(strings.Join(lines, "\n"))
	return nil
}
