package machine

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// The operating system and architecture every node's kubelet labels itself with: the images are
// built for x86-64 Linux only.
const (
	NodeOS   = "linux"
	NodeArch = "amd64"
)

// TemplateNode is what a scale set's nodes carry once they have joined: every label the kubelet
// and the CSR approver give them (PlacementOf), the taints they register with, their GPUs.
func TemplateNode(set spec.ScaleSet) (labels map[string]string, taints []spec.Taint, gpus int) {
	labels = PlacementOf(set)
	maps.Copy(labels, NodeLabels(set.Pool))
	if size, _ := spec.VMCapacity(set.Pool.VMSize); set.Pool.IsGPU() {
		gpus = size.GPUs
	}
	return labels, RegisterTaints(set.Pool), gpus
}

// GangDomainShapes are the cluster's gang domains at full size, grouped by what their nodes are
// once past preflight: their labels (the kubelet's own included), taints and what they offer their
// pods. clusterforge-ops judges whether a gang could ever start against them.
func GangDomainShapes(c *spec.Cluster) []spec.GangDomainShape {
	var shapes []spec.GangDomainShape
	keys := []string{}
	for _, s := range c.ScaleSets() {
		labels, registered, gpus := TemplateNode(s)
		delete(labels, wellknown.GangDomainLabel)
		labels[corev1.LabelOSStable], labels[corev1.LabelArchStable] = NodeOS, NodeArch
		labels[wellknown.RegionLabel] = wellknown.RegionLabelValue(c.Location)
		shape := spec.GangDomainShape{Labels: labels, Allocatable: allocatable(s.Pool, gpus)}
		for _, t := range registered {
			if t.Key != PreflightTaint.Key {
				shape.Taints = append(shape.Taints, spec.GangDomainTaint{Key: t.Key, Value: t.Value, Effect: t.Effect})
			}
		}
		key, _ := json.Marshal(shape) // maps marshal sorted
		i := slices.Index(keys, string(key))
		if i < 0 {
			shapes, keys, i = append(shapes, shape), append(keys, string(key)), len(shapes)
		}
		zones := make([]string, len(s.Zones))
		for j, z := range s.Zones {
			zones[j] = wellknown.ZoneLabelValue(c.Location, z)
		}
		domains := &shapes[i].Domains
		if j := slices.IndexFunc(*domains, func(d spec.GangDomainSize) bool { return d.Name == s.GangDomain() }); j >= 0 {
			(*domains)[j].MaxNodes += s.MaxNodes
			(*domains)[j].Zones = slices.Compact(slices.Sorted(slices.Values(append((*domains)[j].Zones, zones...))))
		} else {
			*domains = append(*domains, spec.GangDomainSize{Name: s.GangDomain(), MaxNodes: s.MaxNodes, Zones: slices.Sorted(slices.Values(zones))})
		}
	}
	return shapes
}

// allocatable is what one of the pool's nodes offers its pods, as the kubelet reports it.
func allocatable(pool spec.Pool, gpus int) map[string]string {
	size, _ := spec.VMCapacity(pool.VMSize)
	cpu, memory := spec.Allocatable(size, pool.MaxPods)
	out := map[string]string{string(corev1.ResourceCPU): strconv.FormatInt(cpu, 10) + "m", string(corev1.ResourceMemory): strconv.FormatInt(memory, 10),
		string(corev1.ResourcePods): strconv.Itoa(pool.MaxPods)}
	if gpus > 0 {
		out[GPUResource] = strconv.Itoa(gpus)
	}
	return out
}
