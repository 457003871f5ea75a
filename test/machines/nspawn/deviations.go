package nspawn

import (
	"encoding/json"

	"github.com/clusterforge/clusterforge/components/addons"
)

// KernelLog is the file each booted worker's node-problem-detector reads kernel lines from
// (deviation "kernel"): the machines share this host's /dev/kmsg, so a line a drill wrote there
// would be every worker's.
const KernelLog = "/var/log/clusterforge-kernel.log"

// Addons are every add-on object, webhook configurations included: the booted workers run the
// operations layer's pods for real, node-problem-detector reads each worker's KernelLog, and the
// workloads with an Azure identity sign in at Entra ID's stand-in.
func (b *Booted) Addons() ([]addons.Object, error) {
	objs, err := b.AllAddons(b.Cloud())
	if err != nil {
		return nil, err
	}
	addons.ReadKernelLogFrom(objs, addons.KernelLogFile(KernelLog))
	return b.trustEntra(objs)
}

// nicInterfaces is the worker NIC as azure-vnet-ipam's file source reads it (deviation "pod IPs"):
// its MAC and subnet, the primary address (the node's) and the secondary ones (its pods').
func nicInterfaces(m *Machine) (string, error) {
	type address struct {
		Address   string
		IsPrimary bool
	}
	addrs := []address{{Address: m.Address, IsPrimary: true}}
	for _, ip := range m.PodIPs {
		addrs = append(addrs, address{Address: ip})
	}
	type subnet struct {
		Prefix      string
		IPAddresses []address
	}
	type nic struct {
		MacAddress string
		IsPrimary  bool
		IPSubnets  []subnet
	}
	out, err := json.MarshalIndent(map[string][]nic{"Interfaces": {{MacAddress: m.MAC, IsPrimary: true,
		IPSubnets: []subnet{{Prefix: m.prefix.Masked().String(), IPAddresses: addrs}}}}}, "", "  ")
	return string(out) + "\n", err
}
