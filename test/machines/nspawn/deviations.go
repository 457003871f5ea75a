package nspawn

import (
	"encoding/json"
)

// KernelLog is the file each booted worker's node-problem-detector reads kernel lines from
// (deviation "kernel"): the machines share this host's /dev/kmsg, so a line a drill wrote there
// would be every worker's.
const KernelLog = "/var/log/clusterforge-kernel.log"

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
