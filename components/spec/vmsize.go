package spec

import (
	"regexp"
	"strconv"
	"strings"
)

// azureSize splits an Azure VM size name, e.g. Standard_E16ds_v5 → family "E", features "ds",
// version "5"; Standard_L8s_v3 → "L", "s", "3"; Standard_DS15_v2 → "DS", "", "2".
var azureSize = regexp.MustCompile(`^Standard_([A-Z]+)(\d+)(-\d+)?([a-z]*)(?:_[A-Z0-9]+)*(?:_v(\d+))?$`)

// HasLocalDisk reports whether an Azure VM size has an instance-local temp or NVMe disk,
// which etcd's data dir needs (L02). Sizes whose feature letters include "d" (D16ds_v5,
// E8ds_v5), the storage-optimised L-series, and the v2/v3 generations (DS15_v2, D16s_v3: the
// seeds' machines) have one, as do the GPU N-series; the diskless v4+ sizes (D16s_v5) do not.
func HasLocalDisk(size string) bool {
	m := azureSize.FindStringSubmatch(size)
	if m == nil {
		return false
	}
	family, features, version := m[1], m[4], m[5]
	switch {
	case family == "L", strings.HasPrefix(family, "N"): // storage-optimised and GPU sizes
		return true
	case strings.Contains(features, "d"):
		return true
	case version == "2" || version == "3":
		return true
	}
	return false
}

// ValidVMSizeName reports whether a name has the shape of an Azure VM size.
func ValidVMSizeName(size string) bool { return azureSize.MatchString(size) }

// Capacity is what one VM of a size offers the kubelet.
type Capacity struct {
	CPUs      int
	MemoryGiB int
	GPUs      int
}

// gpuSizes are the GPU sizes clusterforge knows, from Azure's size tables.
var gpuSizes = map[string]Capacity{
	"Standard_NC4as_T4_v3":      {CPUs: 4, MemoryGiB: 28, GPUs: 1},
	"Standard_NC8as_T4_v3":      {CPUs: 8, MemoryGiB: 56, GPUs: 1},
	"Standard_NC64as_T4_v3":     {CPUs: 64, MemoryGiB: 440, GPUs: 4},
	"Standard_NC24ads_A100_v4":  {CPUs: 24, MemoryGiB: 220, GPUs: 1},
	"Standard_NC96ads_A100_v4":  {CPUs: 96, MemoryGiB: 880, GPUs: 4},
	"Standard_ND96asr_v4":       {CPUs: 96, MemoryGiB: 900, GPUs: 8},
	"Standard_ND96amsr_A100_v4": {CPUs: 96, MemoryGiB: 1900, GPUs: 8},
	"Standard_ND96isr_H100_v5":  {CPUs: 96, MemoryGiB: 1900, GPUs: 8},
}

// memoryPerCPU is GiB of memory per vCPU of the general-purpose families.
var memoryPerCPU = map[string]int{"D": 4, "DS": 4, "E": 8, "F": 2, "FX": 21, "L": 8, "M": 28}

// VMCapacity is the vCPUs, memory and GPUs of an Azure VM size: GPU sizes from a table, the
// others from the vCPU count in the name and the family's memory ratio. ok is false for sizes
// it does not know.
func VMCapacity(size string) (c Capacity, ok bool) {
	if c, ok := gpuSizes[size]; ok {
		return c, true
	}
	m := azureSize.FindStringSubmatch(size)
	if m == nil || m[3] != "" { // constrained-core sizes (E16-4ds_v5) hide the real count
		return Capacity{}, false
	}
	perCPU, ok := memoryPerCPU[m[1]]
	if !ok {
		return Capacity{}, false
	}
	cpus, _ := strconv.Atoi(m[2])
	return Capacity{CPUs: cpus, MemoryGiB: cpus * perCPU}, true
}
