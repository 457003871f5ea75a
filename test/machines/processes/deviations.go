package processes

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// Addons are the add-on objects the KWOK rehearsal applies (deviation "add-ons"): all but the
// operations layer's webhook configurations, whose backend would be a KWOK pod that serves nothing;
// the brake and team drills register them with handlers served from the test process.
func (p *Layout) Addons() ([]addons.Object, error) {
	objs, err := p.AllAddons(azurecloud.Public) // add-on pods are KWOK's: nothing signs in
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(objs, func(o addons.Object) bool {
		switch o.(type) {
		case *admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration:
			return true
		}
		return false
	}), nil
}

// loopbackNetwork returns the cluster with its control-plane and etcd subnets moved onto
// 127.<base>.1.0/24 and 127.<base>.2.0/24 (deviation "addresses"). Offsets inside each subnet
// stay, so etcd member i and the load balancer frontend keep their rendered positions.
func loopbackNetwork(c *spec.Cluster, base int) (*spec.Cluster, error) {
	out := *c
	cp, err := netip.ParsePrefix(c.Network.ControlPlaneSubnet)
	if err != nil {
		return nil, err
	}
	lbIP, err := netip.ParseAddr(c.Network.APIServerIP)
	if err != nil {
		return nil, err
	}
	offset := int64(u32(lbIP)) - int64(u32(cp.Masked().Addr()))
	if offset < 0 || offset >= machines.APIServerMachineOffset {
		return nil, fmt.Errorf("rehearsal: network.apiServerIP %s sits at offset %d of the control-plane subnet; the rehearsal needs it below %d", lbIP, offset, machines.APIServerMachineOffset)
	}
	out.Network.ControlPlaneSubnet = fmt.Sprintf("127.%d.1.0/24", base)
	out.Network.EtcdSubnet = fmt.Sprintf("127.%d.2.0/24", base)
	out.Network.APIServerIP = fmt.Sprintf("127.%d.1.%d", base, offset)
	return &out, nil
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func apiserverMachineIP(base, i int) string {
	return fmt.Sprintf("127.%d.1.%d", base, machines.APIServerMachineOffset+i)
}

// loopbackProfiles are the cluster's certificate profiles; the apiserver's also names every
// apiserver machine address, since components dial their machine's mapped 127.0.0.1 (deviation "pki").
func loopbackProfiles(c *spec.Cluster, apiserverIPs []string) []pki.Profile {
	profiles := pki.Profiles(c)
	for i := range profiles {
		if profiles[i].Name == pki.APIServer {
			profiles[i].IPAddresses = append(slices.Clone(profiles[i].IPAddresses), apiserverIPs...)
		}
	}
	return profiles
}

// localAddress matches 127.0.0.1 and 0.0.0.0 as whole addresses, not inside 10.0.0.0/8.
var localAddress = regexp.MustCompile(`(^|[^0-9.])(127\.0\.0\.1|0\.0\.0\.0)([^0-9.]|$)`)

// ownLoopback replaces a machine's 127.0.0.1 and 0.0.0.0 with its own address (deviation "localhost").
func ownLoopback(s, ip string) string {
	return localAddress.ReplaceAllString(s, "${1}"+ip+"${3}")
}

// skippedUnits are rendered units the rehearsal does not run (deviation "instance metadata",
// deviation "local disk", deviation "no image").
var skippedUnits = map[string]string{
	"clusterforge-identity.service": "the rehearsal writes node.env",
	machine.ImageCheckUnit:          "no image: the processes are this host's builds of the pinned releases, with no image manifest",
	machine.EtcdDiskUnit:            "no local SSD: the data dir is a plain directory, or the disk stand-in's mount (Options.EtcdFsyncLatency)",
}

// flagOverrides change rendered flag values, per unit (deviation "endpoint reconciler").
var flagOverrides = map[string]map[string]string{
	"kube-apiserver.service": {"endpoint-reconciler-type": "none"},
}

// identityEnv is what clusterforge-identity.service would write to machine.NodeEnvFile.
func identityEnv(c *spec.Cluster, in machines.Instance) string {
	return fmt.Sprintf("NODE_NAME=%s\nNODE_IP=%s\nPROVIDER_ID=%s%s\n", in.Name, in.IP, scaleset.ProviderIDPrefix, machines.ResourceID(c, in.Role, in.Name))
}
