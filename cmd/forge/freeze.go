package main

import (
	"fmt"
	"io"
	"os"

	"github.com/clusterforge/clusterforge/components/spec"
)

// freeze writes the stack's derived sizes and addresses into its file, choosing an address
// space no sibling on the same hub uses, and leaves the file untouched on any error.
func freeze(dir, stack string, out io.Writer) error {
	path := spec.StackFile(dir, stack)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	siblings, err := spec.LoadSiblings(dir, stack)
	if err != nil {
		return err
	}
	frozen, err := spec.Freeze(data, siblings)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if string(frozen) == string(data) {
		fmt.Fprintf(out, "%s is frozen already\n", path)
		return nil
	}
	c, err := spec.ParseStackFile(frozen)
	if err != nil {
		return err
	}
	tmp := path + ".freeze"
	if err := os.WriteFile(tmp, frozen, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	fmt.Fprintf(out, "froze %s: address space %s, etcd %s, apiserver %s, for %d nodes; review and commit it\n",
		path, c.Network.AddressSpace, c.EtcdMain.VMSize, c.APIServer.VMSize, c.TargetNodes)
	return nil
}
