package node

import (
	"context"
	"os"
	"path/filepath"

	"github.com/clusterforge/clusterforge/components/machine"
)

// installBinaries puts the role's pinned binaries in /usr/local/bin and, on workers, the CNI
// plugins machine.CNIPlugins (from binaries_dir/cni) in /opt/cni/bin.
func (b *bake) installBinaries(ctx context.Context) error {
	if err := b.run(ctx, "mkdir -p "+q(b.StagingDir)); err != nil {
		return err
	}
	for _, name := range machine.ImageBinaries[b.Role] {
		if err := b.installFile(ctx, filepath.Join(b.BinariesDir, name), machine.BinDir+"/"+name); err != nil {
			return err
		}
	}
	if b.Role != machine.ImageWorker {
		return nil
	}
	for _, name := range machine.CNIPlugins {
		if err := b.installFile(ctx, filepath.Join(b.BinariesDir, "cni", name), machine.CNIBinDir+"/"+name); err != nil {
			return err
		}
	}
	return nil
}

func (b *bake) installFile(ctx context.Context, local, dst string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	return b.install(ctx, f, dst, 0o755)
}
