package spec

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

// FieldError is one refused value: the field's path in the stack config, what is wrong, and the fix.
type FieldError struct {
	Field   string
	Problem string
	Fix     string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("clusterforge:cluster.%s: %s; %s", e.Field, e.Problem, e.Fix)
}

// Fields lists the field of every FieldError inside err, in order.
func Fields(err error) []string {
	var fields []string
	var walk func(error)
	walk = func(err error) {
		var fe *FieldError
		if errors.As(err, &fe) && fe == err {
			fields = append(fields, fe.Field)
			return
		}
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return fields
}

type validator struct{ errs []error }

func (v *validator) fail(field, fix, problem string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Problem: fmt.Sprintf(problem, args...), Fix: fix})
}

var (
	clusterName  = regexp.MustCompile(`^[a-z][a-z0-9-]{2,19}$`)
	poolName     = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
	version      = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	vnetID       = regexp.MustCompile(`^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+$`)
	galleryImage = regexp.MustCompile(`^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/galleries/[^/]+/images/[^/]+(/versions/[^/]+)?$`)
	labelKey     = regexp.MustCompile(`^([a-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
)

// Validate checks a defaulted Cluster and returns every problem at once, each naming its field.
func (c *Cluster) Validate() error {
	v := &validator{}
	if !clusterName.MatchString(c.Name) {
		v.fail("name", "use 3 to 20 lowercase letters, digits and '-', starting with a letter", "%q is not a valid cluster name", c.Name)
	}
	if len(c.Zones) == 0 {
		v.fail("zones", `list at least one zone, e.g. ["1", "2", "3"]`, "no availability zones")
	}
	for field, value := range map[string]string{
		"versions.kubernetes": c.Versions.Kubernetes, "versions.etcd": c.Versions.Etcd, "versions.containerd": c.Versions.Containerd,
		"versions.runc": c.Versions.Runc, "versions.crictl": c.Versions.Crictl, "versions.azureCNI": c.Versions.AzureCNI,
		"versions.schedulerPlugins": c.Versions.SchedulerPlugins, "versions.coreDNS": c.Versions.CoreDNS,
		"versions.clusterAutoscaler": c.Versions.ClusterAutoscaler, "versions.prometheus": c.Versions.Prometheus,
		"versions.nodeExporter": c.Versions.NodeExporter,
	} {
		if !version.MatchString(value) {
			v.fail(field, "write a release tag such as v1.34.1", "%q is not a version", value)
		}
	}
	if !galleryImage.MatchString(c.Image) {
		v.fail("image", "give an Azure Compute Gallery image (version) id from `packer build`", "%q is not a gallery image id", c.Image)
	}
	c.validateEtcd(v, "etcdMain", c.EtcdMain)
	c.validateEtcd(v, "etcdEvents", c.EtcdEvents)
	c.validateAPIServer(v)
	c.validateKubelet(v)
	c.validateAutoscaler(v)
	c.validatePools(v)
	c.validateNetwork(v)
	return errors.Join(v.errs...)
}

func (c *Cluster) validateEtcd(v *validator, field string, e Etcd) {
	switch {
	case e.Members < 1 || e.Members > 7:
		v.fail(field+".members", "use 3 or 5 (L01)", "%d members is outside 1 to 7", e.Members)
	case e.Members%2 == 0:
		v.fail(field+".members", fmt.Sprintf("use %d or %d: an even member count tolerates no more failures than one fewer", e.Members-1, e.Members+1),
			"%d is an even member count", e.Members)
	}
	if e.QuotaBackendBytes <= 0 || e.QuotaBackendBytes > MaxQuotaBackendBytes {
		v.fail(field+".quotaBackendBytes", "use at most 8589934592 (8 GiB), etcd's recommended ceiling (L04)",
			"%d bytes is outside 1 byte to 8 GiB", e.QuotaBackendBytes)
	}
	if !HasLocalDisk(e.VMSize) {
		v.fail(field+".vmSize", "pick a size with a local disk, e.g. Standard_E8ds_v5 or Standard_L8s_v3 (L02)",
			"%q has no local temp or NVMe disk for etcd's data dir", e.VMSize)
	}
}

func (c *Cluster) validateAPIServer(v *validator) {
	a := c.APIServer
	if a.Count < 2 {
		v.fail("apiServer.count", "run at least 2 apiservers, 5 for the largest clusters (L05)", "%d apiservers leave no redundancy", a.Count)
	}
	if !ValidVMSizeName(a.VMSize) {
		v.fail("apiServer.vmSize", "use an Azure size name such as Standard_E16s_v5", "%q is not an Azure VM size", a.VMSize)
	}
	if a.MaxRequestsInflight < 1 || a.MaxMutatingRequestsInflight < 1 {
		v.fail("apiServer.maxRequestsInflight", "leave both inflight limits unset to size them from targetNodes (L09)",
			"inflight limits must be positive, got %d and %d", a.MaxRequestsInflight, a.MaxMutatingRequestsInflight)
	}
	if a.AuditLogMaxBackup < 1 || a.AuditLogMaxSizeMB < 1 {
		v.fail("apiServer.auditLogMaxBackup", "keep at least one rotated audit log (L06)", "audit log rotation must keep files, got maxbackup %d, maxsize %d MB", a.AuditLogMaxBackup, a.AuditLogMaxSizeMB)
	}
	if d, err := time.ParseDuration(a.EtcdCompactionInterval); err != nil || d <= 0 {
		v.fail("apiServer.etcdCompactionInterval", `write a positive Go duration such as "5m" (L04)`, "%q is not a duration", a.EtcdCompactionInterval)
	}
}

func (c *Cluster) validateKubelet(v *validator) {
	// Azure allows 256 IP configurations per NIC: the primary plus one per pod (L29).
	if c.Kubelet.MaxPods < 1 || c.Kubelet.MaxPods > 250 {
		v.fail("kubelet.maxPods", "use 1 to 250: each pod takes a secondary IP configuration on the node's NIC (L29)", "%d is out of range", c.Kubelet.MaxPods)
	}
	if c.Kubelet.MaxConcurrentDownloads < 1 {
		v.fail("kubelet.maxConcurrentDownloads", "use a positive number, e.g. 10 (L24)", "%d downloads at once", c.Kubelet.MaxConcurrentDownloads)
	}
	if d, err := time.ParseDuration(c.Kubelet.ImagePullProgressTimeout); err != nil || d <= 0 {
		v.fail("kubelet.imagePullProgressTimeout", `write a positive Go duration such as "5m" (L23)`, "%q is not a duration", c.Kubelet.ImagePullProgressTimeout)
	}
	if c.Kubelet.MaxParallelImagePulls < 1 {
		v.fail("kubelet.maxParallelImagePulls", "use a positive number, e.g. 10 (L20)", "%d pulls at once", c.Kubelet.MaxParallelImagePulls)
	}
}

func (c *Cluster) validateAutoscaler(v *validator) {
	a := c.Autoscaler
	if a.MaxUnreadyPercentage < 1 || a.MaxUnreadyPercentage > 100 {
		v.fail("autoscaler.maxUnreadyPercentage", "use 1 to 100; 10 stops the autoscaler while a tenth of the fleet is unready (L19)",
			"%d%% is out of range", a.MaxUnreadyPercentage)
	}
	if a.OkUnreadyCount < 0 {
		v.fail("autoscaler.okUnreadyCount", "use 0 or more", "%d unready nodes", a.OkUnreadyCount)
	}
	if a.MaxScaleDownParallelism < 1 {
		v.fail("autoscaler.maxScaleDownParallelism", "use a positive number, e.g. 10", "%d nodes at once", a.MaxScaleDownParallelism)
	}
	for field, value := range map[string]string{
		"autoscaler.scaleDownUnneededTime": a.ScaleDownUnneededTime, "autoscaler.scaleDownDelayAfterAdd": a.ScaleDownDelayAfterAdd,
		"autoscaler.maxNodeProvisionTime": a.MaxNodeProvisionTime,
	} {
		if d, err := time.ParseDuration(value); err != nil || d <= 0 {
			v.fail(field, `write a positive Go duration such as "10m"`, "%q is not a duration", value)
		}
	}
}

func (c *Cluster) validatePools(v *validator) {
	if len(c.Pools) == 0 {
		v.fail("pools", "declare at least one worker pool", "the cluster has no worker pools")
	}
	seen := map[string]bool{}
	total := 0
	for i, p := range c.Pools {
		field := fmt.Sprintf("pools[%d]", i)
		if !poolName.MatchString(p.Name) {
			v.fail(field+".name", "use 1 to 12 lowercase letters and digits, starting with a letter", "%q is not a valid pool name", p.Name)
		}
		if seen[p.Name] {
			v.fail(field+".name", "give every pool its own name", "pool %q is declared twice", p.Name)
		}
		seen[p.Name] = true
		if !ValidVMSizeName(p.VMSize) {
			v.fail(field+".vmSize", "use an Azure size name such as Standard_D16ds_v5 or Standard_ND96isr_H100_v5", "%q is not an Azure VM size", p.VMSize)
		}
		if ValidVMSizeName(p.VMSize) && !HasLocalDisk(p.VMSize) {
			v.fail(field+".vmSize", "pick a size with a local disk, e.g. Standard_D16ds_v5: containerd's root and the OS disk live there (L22)",
				"%q has no local temp or NVMe disk", p.VMSize)
		}
		if _, known := VMCapacity(p.VMSize); ValidVMSizeName(p.VMSize) && !known {
			v.fail(field+".vmSize", "use a size whose vCPUs and memory clusterforge knows, or add it to spec.VMCapacity's table: balloon pods are sized from it (L15)",
				"the capacity of %q is unknown", p.VMSize)
		}
		if p.Nodes < 0 || p.MaxNodes < p.Nodes {
			v.fail(field+".maxNodes", "set maxNodes to at least nodes (and nodes to at least 0)", "nodes %d, maxNodes %d", p.Nodes, p.MaxNodes)
		}
		if !galleryImage.MatchString(p.Image) {
			v.fail(field+".image", "give an Azure Compute Gallery image (version) id from `packer build`", "%q is not a gallery image id", p.Image)
		}
		for k := range p.Labels {
			if !labelKey.MatchString(k) {
				v.fail(fmt.Sprintf("%s.labels[%s]", field, k), "use a Kubernetes label key such as example.com/team", "%q is not a valid label key", k)
			}
		}
		for j, t := range p.Taints {
			tf := fmt.Sprintf("%s.taints[%d]", field, j)
			if !labelKey.MatchString(t.Key) {
				v.fail(tf+".key", "use a Kubernetes key such as example.com/dedicated", "%q is not a valid taint key", t.Key)
			}
			if t.Effect != "NoSchedule" && t.Effect != "PreferNoSchedule" && t.Effect != "NoExecute" {
				v.fail(tf+".effect", "use NoSchedule, PreferNoSchedule or NoExecute", "%q is not a taint effect", t.Effect)
			}
		}
		total += p.MaxNodes
	}
	if c.TargetNodes < total {
		v.fail("targetNodes", fmt.Sprintf("raise it to at least %d or leave it unset", total),
			"%d is below the pools' total maxNodes %d: the control plane would be sized too small (L09)", c.TargetNodes, total)
	}
}

// prefix parses one CIDR field, reporting it if malformed.
func (v *validator) prefix(field, value string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(value)
	if err != nil || !p.Addr().Is4() {
		v.fail(field, "write an IPv4 CIDR such as 10.0.0.0/16", "%q is not an IPv4 CIDR", value)
		return netip.Prefix{}, false
	}
	if p.Masked() != p {
		v.fail(field, fmt.Sprintf("write it as %s", p.Masked()), "%q has host bits set", value)
		return netip.Prefix{}, false
	}
	return p, true
}

func (c *Cluster) validateNetwork(v *validator) {
	n := c.Network
	if !vnetID.MatchString(n.Hub.VNetID) {
		v.fail("network.hub.vnetId", "give the hub VNet's resource id, /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Network/virtualNetworks/<name> (L31)",
			"%q is not a VNet resource id", n.Hub.VNetID)
	}
	type named struct {
		field  string
		prefix netip.Prefix
	}
	var all []named
	for _, f := range []struct{ field, value string }{
		{"network.addressSpace", n.AddressSpace},
		{"network.controlPlaneSubnet", n.ControlPlaneSubnet},
		{"network.etcdSubnet", n.EtcdSubnet},
		{"network.nodeSubnet", n.NodeSubnet},
		{"network.serviceCIDR", n.ServiceCIDR},
		{"network.hub.addressSpace", n.Hub.AddressSpace},
	} {
		if p, ok := v.prefix(f.field, f.value); ok {
			all = append(all, named{f.field, p})
		}
	}
	if len(all) < 6 {
		return // Malformed CIDRs are reported; their relations cannot be checked.
	}
	vnet, subnets, service, hub := all[0], all[1:4], all[4], all[5]
	for i, s := range subnets {
		if !contains(vnet.prefix, s.prefix) {
			v.fail(s.field, fmt.Sprintf("place it inside network.addressSpace %s", vnet.prefix), "%s is outside the VNet", s.prefix)
		}
		for _, o := range subnets[i+1:] {
			if s.prefix.Overlaps(o.prefix) {
				v.fail(o.field, fmt.Sprintf("move it off %s (%s)", s.field, s.prefix), "%s overlaps another subnet", o.prefix)
			}
		}
	}
	for _, outside := range []named{service, hub} {
		if outside.prefix.Overlaps(vnet.prefix) {
			v.fail(outside.field, fmt.Sprintf("pick a range that does not overlap network.addressSpace %s", vnet.prefix), "%s overlaps the spoke VNet", outside.prefix)
		}
	}
	if service.prefix.Overlaps(hub.prefix) {
		v.fail(service.field, fmt.Sprintf("pick a range that does not overlap the hub %s", hub.prefix), "%s overlaps the hub", service.prefix)
	}

	need := c.TargetNodes*(c.Kubelet.MaxPods+1) + azureReservedAddresses
	if have := size(subnets[2].prefix); have < need {
		v.fail("network.nodeSubnet", fmt.Sprintf("use a /%d or larger, or leave it unset to size it from targetNodes (L30)", 32-bitsFor(need)),
			"%s holds %d addresses but %d nodes × (%d pods + 1) need %d", subnets[2].prefix, have, c.TargetNodes, c.Kubelet.MaxPods, need)
	}
	etcd := subnets[1].prefix
	if last := etcdEventsIPOffset + c.EtcdEvents.Members; size(etcd) <= last || etcdMainIPOffset+c.EtcdMain.Members > etcdEventsIPOffset {
		v.fail("network.etcdSubnet", "use a /26 or larger", "%s cannot hold the etcd members' static addresses", etcd)
	}
	if ip, err := netip.ParseAddr(n.APIServerIP); err != nil || !subnets[0].prefix.Contains(ip) || addrOffset(subnets[0].prefix, ip) < 4 {
		v.fail("network.apiServerIP", fmt.Sprintf("pick a free address inside network.controlPlaneSubnet %s, past the first four", subnets[0].prefix),
			"%q is not a usable control-plane address", n.APIServerIP)
	}
}

func contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

func size(p netip.Prefix) int { return 1 << (32 - p.Bits()) }

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}

func addrOffset(p netip.Prefix, ip netip.Addr) int {
	a, b := p.Masked().Addr().As4(), ip.As4()
	return int(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])) -
		int(uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3]))
}

// IsPlaceholderImage reports whether an image id is the offline default that `pulumi up` refuses.
func IsPlaceholderImage(id string) bool {
	return strings.HasPrefix(id, "/subscriptions/00000000-0000-0000-0000-000000000000/")
}
