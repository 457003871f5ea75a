package spec

import (
	"regexp"
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
