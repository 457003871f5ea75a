package rehearsal

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// JoinBakedNode boots a worker of pool from a baked node image, as Azure would boot a VMSS
// instance: the pool's rendered files are written into the image (cloud-init's part), then the
// local-disk, containerd and kubelet units start, and the kubelet joins this rehearsal's control
// plane through the load balancer with TLS bootstrap. The worker deviations are applied.
func (r *Rehearsal) JoinBakedNode(ctx context.Context, image, pool, dir string, progress io.Writer) (*BakedNode, error) {
	m, err := machine.Render(r.Plan.Cluster, r.Plan.Bundle, spec.WorkerRole(pool))
	if err != nil {
		return nil, err
	}
	n, err := BootBakedNode(ctx, image, dir, progress)
	if err != nil {
		return nil, err
	}
	if err := n.configure(m, r.Plan.Base); err != nil {
		_ = n.Shutdown()
		return nil, err
	}
	var units []string
	for _, u := range m.Units {
		if _, skipped := skippedUnits[u.Name]; !skipped {
			units = append(units, u.Name)
		}
	}
	if err := n.Start(ctx, append([]string{machine.ContainerdDiskUnit, machine.ContainerdUnit}, units...)...); err != nil {
		_ = n.Shutdown()
		return nil, err
	}
	return n, nil
}

// configure writes the worker's rendered files and units into the image, then the worker
// deviations: node.env, the edits of bakedNodeEdits, the loopback CNI network.
func (n *BakedNode) configure(m machine.Machine, base int) error {
	files := append(m.Files, m.UnitFiles()...)
	files = append(files,
		machine.File{Path: machine.NodeEnvFile, Content: identityEnv(n.Hostname(), workerIP(base)), Mode: 0o644},
		machine.File{Path: machine.CNIConfDir + "/10-rehearsal-loopback.conflist", Content: loopbackCNI, Mode: 0o644})
	for _, f := range files {
		if err := n.WriteFile(f.Path, f.Content, os.FileMode(f.Mode)); err != nil {
			return err
		}
	}
	for _, e := range bakedNodeEdits {
		path := filepath.Join(n.Root, e.path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), e.old) {
			return fmt.Errorf("worker deviation: %s no longer has %q; update deviations.go", e.path, e.old)
		}
		if err := n.WriteFile(e.path, strings.Replace(string(data), e.old, e.new, 1), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Hostname is the node's name: the kubelet registers under the host name, which the node shares
// with this machine (deviation "systemd").
func (n *BakedNode) Hostname() string {
	name, _ := os.Hostname()
	return strings.ToLower(name)
}
