// Package containerdcfg is what containerd's effective config holds for a stack, in the words of
// `containerd config dump` (containerd 2's TOML, single-quoted): the settings the lessons ask for,
// which the tests read back from the real binary, on the fast tier and on a booted worker.
package containerdcfg

import (
	"fmt"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Settings are lines the dump of c's worker config must contain; gpu for a GPU image's.
func Settings(c *spec.Cluster, gpu bool) []string {
	runtime, binary := "runc", machine.BinDir+"/runc"
	if gpu {
		runtime, binary = "nvidia", machine.NvidiaContainerRuntime
	}
	timeout, _ := time.ParseDuration(c.Kubelet.ImagePullProgressTimeout) // validated
	return []string{
		"version = 4",
		"root = '" + machine.ContainerdRoot + "'",
		"snapshotter = 'overlayfs'",
		fmt.Sprintf("max_concurrent_downloads = %d", c.Kubelet.MaxConcurrentDownloads),
		"image_pull_progress_timeout = '" + timeout.String() + "'",
		"sandbox = '" + c.Versions.PauseImage + "'",
		"default_runtime_name = '" + runtime + "'",
		"BinaryName = '" + binary + "'",
		"SystemdCgroup = true",
		"enable_cdi = false",
		"enable_criu = false",
	}
}
