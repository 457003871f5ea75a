package spec

import (
	"bytes"
	"fmt"
	"net/netip"
	"path"
	"slices"
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
		{"network.etcdSubnet", &n.EtcdSubnet},
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
	for i, p := range c.Pools {
		if i < len(c.givenVNets) && len(p.VNets) > c.givenVNets[i] {
			out = append(out, poolVNetsPath(i))
		}
	}
	return out
}

func poolVNetsPath(i int) string { return PoolField(i, "vnets") }

// Freeze writes every unfrozen size and address of a stack file's cluster into the file, each
// marked by a comment, keeping the rest of the file (comments included) as it is. Derived VNets
// take the first free blocks of 10.0.0.0/8 beside the hub and every frozen sibling peered with
// the same hub, so clusters sharing a hub never collide; a grown pool's VNets are appended.
func Freeze(stackYAML []byte, siblings []*Cluster) ([]byte, error) {
	c, err := ParseStackFile(stackYAML)
	if err != nil {
		return nil, err
	}
	unfrozen := c.Unfrozen()
	if len(unfrozen) == 0 {
		return stackYAML, nil
	}
	taken := c.outsideTaken()
	for _, s := range siblings {
		// An unfrozen sibling's derived blocks are not its own yet: they move when it is frozen.
		if c.sharesHubWith(s) {
			taken = append(taken, s.givenPrefixes()...)
		}
	}
	c.placeNetwork(taken)
	if c.Network.AddressSpace == "" || slices.ContainsFunc(c.Pools, func(p Pool) bool { return len(p.VNets) < p.VNetsNeeded() }) {
		return nil, fmt.Errorf("no free blocks left in 10.0.0.0/8 beside the hub and the clusters peered with it; set network.addressSpace and pools[].vnets")
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
	comment := "frozen by make freeze (targetNodes " + strconv.Itoa(c.TargetNodes) + ")"
	for _, path := range unfrozen {
		if v, ok := values[path]; ok {
			setPath(target, strings.Split(path, "."), scalar(v), comment)
		}
	}
	for i, p := range c.Pools {
		if slices.Contains(unfrozen, poolVNetsPath(i)) {
			setPoolVNets(target, i, p.VNets, comment)
		}
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

func overlapsAny(p netip.Prefix, others []netip.Prefix) bool {
	for _, o := range others {
		if p.Overlaps(o) {
			return true
		}
	}
	return false
}

// sharesHubWith reports whether o is another cluster peered with c's hub.
func (c *Cluster) sharesHubWith(o *Cluster) bool {
	return o.Name != c.Name && strings.EqualFold(o.Network.Hub.VNetID, c.Network.Hub.VNetID)
}

// CheckHub refuses a cluster whose VNets overlap another cluster's peered with the same hub (Azure
// refuses the second peering, so the apply would stop halfway), or that takes the hub's peered
// group past Azure's limit (HubGroup).
func CheckHub(c *Cluster, others []*Cluster) error {
	if hub := c.HubGroup(others); hub.Over() {
		return hub.Refusal()
	}
	var clashes []string
	for _, o := range others {
		if !c.sharesHubWith(o) {
			continue
		}
		for _, own := range c.vnetPrefixes() {
			for _, p := range o.vnetPrefixes() {
				if own.Overlaps(p) {
					clashes = append(clashes, fmt.Sprintf("%s overlaps %s's %s", own, o.Name, p))
				}
			}
		}
	}
	if len(clashes) == 0 {
		return nil
	}
	return &FieldError{Field: "network.addressSpace",
		Problem: fmt.Sprintf("%s, peered with the same hub %s", strings.Join(clashes, ", "), path.Base(c.Network.Hub.VNetID)),
		Fix:     "give each cluster its own blocks: make freeze picks free ones for a stack that has not been applied"}
}

// vnetPrefixes are the cluster's VNets: the control plane's and every pool's.
func (c *Cluster) vnetPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range append([]string{c.Network.AddressSpace}, c.NodeSubnets()...) {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// givenPrefixes are the VNets the stack file itself gives: a frozen cluster's own.
func (c *Cluster) givenPrefixes() []netip.Prefix {
	var out []netip.Prefix
	given := c.givenVNetPrefixes()
	if c.explicit[&c.Network.AddressSpace] {
		given = append(given, c.Network.AddressSpace)
	}
	for _, s := range given {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// setPoolVNets writes pools[i].vnets as a flow list under the stack's pools.
func setPoolVNets(cluster *yaml.Node, i int, vnets []string, comment string) {
	pools, err := child(cluster, "pools")
	if err != nil || pools.Kind != yaml.SequenceNode || i >= len(pools.Content) {
		return // ParseStackFile read the pools from here
	}
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
	for _, v := range vnets {
		list.Content = append(list.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
	}
	setPath(pools.Content[i], []string{"vnets"}, list, comment)
}
