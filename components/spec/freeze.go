package spec

import (
	"bytes"
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// frozenField is a value Default derives from targetNodes or a sizing table. A running cluster
// must not change one because a pool grew or clusterforge's tables moved, so `make freeze`
// writes each into the stack file before the first `pulumi up`, which refuses a stack that
// leaves any to derivation.
type frozenField struct {
	path string
	ptr  any
}

func (c *Cluster) frozenFields() []frozenField {
	n := &c.Network
	return []frozenField{
		{"targetNodes", &c.TargetNodes},
		{"etcdMain.vmSize", &c.EtcdMain.VMSize}, {"etcdMain.quotaBackendBytes", &c.EtcdMain.QuotaBackendBytes},
		{"etcdEvents.members", &c.EtcdEvents.Members}, {"etcdEvents.vmSize", &c.EtcdEvents.VMSize},
		{"etcdEvents.quotaBackendBytes", &c.EtcdEvents.QuotaBackendBytes},
		{"apiServer.vmSize", &c.APIServer.VMSize}, {"apiServer.maxRequestsInflight", &c.APIServer.MaxRequestsInflight},
		{"apiServer.maxMutatingRequestsInflight", &c.APIServer.MaxMutatingRequestsInflight},
		{"network.addressSpace", &n.AddressSpace}, {"network.controlPlaneSubnet", &n.ControlPlaneSubnet},
		{"network.etcdSubnet", &n.EtcdSubnet}, {"network.nodeSubnet", &n.NodeSubnet},
		{"network.apiServerIP", &n.APIServerIP}, {"network.serviceCIDR", &n.ServiceCIDR},
	}
}

// Unfrozen lists the sizes and addresses the stack leaves to derivation.
func (c *Cluster) Unfrozen() []string {
	var out []string
	for _, f := range c.frozenFields() {
		if !c.explicit[f.ptr] {
			out = append(out, f.path)
		}
	}
	return out
}

// Freeze writes every unfrozen size and address of a stack file's cluster into the file, each
// marked by a comment, keeping the rest of the file (comments included) as it is. A cluster
// whose address space is derived gets the first block of 10.0.0.0/8 that overlaps neither its
// hub nor a frozen sibling peered with the same hub, so clusters sharing a hub never collide.
func Freeze(stackYAML []byte, siblings []*Cluster) ([]byte, error) {
	c, err := ParseStackFile(stackYAML)
	if err != nil {
		return nil, err
	}
	unfrozen := c.Unfrozen()
	if len(unfrozen) == 0 {
		return stackYAML, nil
	}
	if !c.explicit[&c.Network.AddressSpace] {
		if err := c.moveAddressPlan(siblings); err != nil {
			return nil, err
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(stackYAML, &doc); err != nil {
		return nil, err
	}
	config, _ := child(doc.Content[0], "config") // ParseStackFile found both
	target, _ := child(config, ConfigKey)
	values := map[string]any{}
	for _, f := range c.frozenFields() {
		values[f.path] = f.ptr
	}
	for _, path := range unfrozen {
		setPath(target, strings.Split(path, "."), scalar(values[path]), "frozen by make freeze (targetNodes "+strconv.Itoa(c.TargetNodes)+")")
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	frozen, err := ParseStackFile(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("the frozen stack file does not validate: %w", err)
	}
	if left := frozen.Unfrozen(); len(left) > 0 {
		return nil, fmt.Errorf("freeze left %v derived", left)
	}
	return out.Bytes(), nil
}

// scalar is a field's value as a YAML scalar the strict decoder reads back.
func scalar(ptr any) *yaml.Node {
	switch v := ptr.(type) {
	case *int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(*v)}
	case *int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(*v, 10)}
	case *string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: *v}
	}
	panic(fmt.Sprintf("spec: no scalar for %T", ptr))
}

// setPath sets key path under mapping m to value, creating mappings on the way.
func setPath(m *yaml.Node, path []string, value *yaml.Node, comment string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != path[0] {
			continue
		}
		if len(path) == 1 {
			value.LineComment = comment
			m.Content[i+1] = value
			return
		}
		if m.Content[i+1].Kind != yaml.MappingNode { // "etcdMain:" with no value
			m.Content[i+1] = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		}
		setPath(m.Content[i+1], path[1:], value, comment)
		return
	}
	key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: path[0]}
	if len(path) == 1 {
		value.LineComment = comment
		m.Content = append(m.Content, key, value)
		return
	}
	sub := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, key, sub)
	setPath(sub, path[1:], value, comment)
}

// moveAddressPlan derives the network again from the first free base address.
func (c *Cluster) moveAddressPlan(siblings []*Cluster) error {
	var taken []netip.Prefix
	if hub, err := netip.ParsePrefix(c.Network.Hub.AddressSpace); err == nil {
		taken = append(taken, hub)
	}
	for _, s := range siblings {
		// An unfrozen sibling's derived block is not its own yet: it moves when it is frozen.
		if s.Name == c.Name || !s.explicit[&s.Network.AddressSpace] || !strings.EqualFold(s.Network.Hub.VNetID, c.Network.Hub.VNetID) {
			continue
		}
		if p, err := netip.ParsePrefix(s.Network.AddressSpace); err == nil {
			taken = append(taken, p)
		}
	}
	want := netip.MustParsePrefix(c.Network.AddressSpace).Bits()
	block := netip.PrefixFrom(netip.MustParseAddr(defaultVNetBase), want)
	pool := netip.MustParsePrefix("10.0.0.0/8")
	for pool.Contains(block.Addr()) {
		if !overlapsAny(block, taken) {
			for _, f := range c.frozenFields() {
				if s, ok := f.ptr.(*string); ok && strings.HasPrefix(f.path, "network.") && !c.explicit[f.ptr] {
					*s = ""
				}
			}
			c.defaultNetworkAt(min(max(c.TargetNodes, 0), MaxClusterNodes), block.Addr())
			return nil
		}
		block = netip.PrefixFrom(addrAdd(block.Addr(), 1<<(32-want)), want)
	}
	return fmt.Errorf("network.addressSpace: no free /%d in 10.0.0.0/8 beside the hub and the clusters peered with it; set network.addressSpace", want)
}

func overlapsAny(p netip.Prefix, others []netip.Prefix) bool {
	for _, o := range others {
		if p.Overlaps(o) {
			return true
		}
	}
	return false
}

// CheckSharedHub refuses a cluster whose address space overlaps another cluster's peered with
// the same hub: Azure refuses the second peering, so the apply would stop halfway.
func CheckSharedHub(c *Cluster, others []*Cluster) error {
	own, err := netip.ParsePrefix(c.Network.AddressSpace)
	if err != nil {
		return nil // Validate reports it.
	}
	var clashes []string
	for _, o := range others {
		p, err := netip.ParsePrefix(o.Network.AddressSpace)
		if o.Name != c.Name && err == nil && strings.EqualFold(o.Network.Hub.VNetID, c.Network.Hub.VNetID) && own.Overlaps(p) {
			clashes = append(clashes, fmt.Sprintf("%s (%s)", o.Name, p))
		}
	}
	if len(clashes) == 0 {
		return nil
	}
	return &FieldError{Field: "network.addressSpace",
		Problem: fmt.Sprintf("%s overlaps %s, peered with the same hub %s", own, strings.Join(clashes, ", "), path.Base(c.Network.Hub.VNetID)),
		Fix:     "give each cluster its own block: make freeze picks a free one for a stack that has not been applied"}
}
