package processes

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/clusterforge/clusterforge/test/machines"
)

// StartStore starts Azurite on the store's data and creates the container, as the Pulumi program
// does before any etcd machine exists.
func (r *Rehearsal) StartStore(ctx context.Context) error {
	host, port, _ := net.SplitHostPort(r.StoreAddress())
	argv := []string{filepath.Join(r.Tools, "azurite-blob"), "--blobHost", host, "--blobPort", port,
		"--location", r.StoreDir(), "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry"}
	proc, err := machines.StartProcess(argv, os.Environ(), r.Dir, filepath.Join(r.Dir, "logs", "azurite.log"))
	if err != nil {
		return fmt.Errorf("start Azurite: %w (run `make tools-rehearsal`)", err)
	}
	proc.Role, proc.Machine, proc.Name, proc.URL = "backup-store", "store", "azurite", "http://"+r.StoreAddress()
	if err := r.track(proc); err != nil {
		return err
	}
	return r.CreateContainer(ctx)
}
