package machines

import (
	"fmt"
	"os"

	"github.com/clusterforge/clusterforge/test/etcdprobe"
	"github.com/clusterforge/clusterforge/test/netns"
	"github.com/clusterforge/clusterforge/test/standin/arm"
	"github.com/clusterforge/clusterforge/test/standin/azuredns"
	"github.com/clusterforge/clusterforge/test/standin/disk"
	"github.com/clusterforge/clusterforge/test/standin/entra"
	"github.com/clusterforge/clusterforge/test/standin/imds"
	"github.com/clusterforge/clusterforge/test/standin/lb"
)

// Subcommand runs the stand-ins the rehearsals start as `<self> lb|imds|entra|azure-dns|arm|disk|forward ...`,
// and the scale benchmark's etcd write probe (`<self> etcd-probe ...`), whichever args name; ran is false for any other args. The rehearse command and the test
// binaries that rehearse call it first.
func Subcommand(args []string) (ran bool, err error) {
	if len(args) == 0 {
		return false, nil
	}
	switch args[0] {
	case "lb":
		return true, lb.Main(args[1:])
	case "forward":
		return true, netns.ForwardMain(args[1:])
	case "imds":
		return true, imds.Main(args[1:])
	case "entra":
		return true, entra.Main(args[1:])
	case "azure-dns":
		return true, azuredns.Main(args[1:])
	case "arm":
		return true, arm.Main(args[1:])
	case disk.Command:
		return true, disk.Main(args[1:])
	case etcdprobe.Command:
		return true, etcdprobe.Main(args[1:])
	}
	return false, nil
}

// ServeSubcommand is Subcommand for a test binary's TestMain: when the binary was started as the
// load balancer, the metadata service, Azure DNS, Entra ID, Resource Manager or the host forwarder, it serves and exits.
func ServeSubcommand() {
	if ran, err := Subcommand(os.Args[1:]); ran {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}
