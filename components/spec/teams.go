package spec

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TeamDataResources are the kinds that carry a team's data rather than describe its workloads:
// held to Teams.MaxDataObjectBytes, every other kind to Teams.MaxObjectBytes.
var TeamDataResources = []string{"configmaps", "secrets"}

// ObjectBytes is the largest object of resource (a plural name, e.g. "pods" or "jobs") a team
// may write.
func (t Teams) ObjectBytes(resource string) int64 {
	for _, data := range TeamDataResources {
		if resource == data {
			return t.MaxDataObjectBytes
		}
	}
	return t.MaxObjectBytes
}

// MaxFootprintShare is the part of etcd-main's quota one team's Footprint may reach: the rest
// holds the cluster's own objects, the other teams' and the history between two compactions.
const MaxFootprintShare = 2

// Footprint is the most of etcd-main one team namespace can hold: each kind its quota counts,
// times the largest object of that kind. A kind counted twice (pods and count/pods) counts at the
// lower limit, as the apiservers enforce both.
func (t Teams) Footprint() int64 {
	counts := map[string]int64{}
	for name, hard := range t.Quota {
		kind, counted := countedKind(name)
		q, err := resource.ParseQuantity(hard)
		if !counted || err != nil {
			continue
		}
		if n, seen := counts[kind]; !seen || q.Value() < n {
			counts[kind] = q.Value()
		}
	}
	var total int64
	for kind, n := range counts {
		plural, _, _ := strings.Cut(kind, ".")
		total += n * t.ObjectBytes(plural)
	}
	return total
}

// countedKind is the kind (plural[.group]) a quota name counts objects of: count/<kind>, or one
// of the standard names that count objects.
func countedKind(name string) (string, bool) {
	if kind, ok := strings.CutPrefix(name, "count/"); ok {
		return kind, true
	}
	switch name {
	case "pods", "services", "secrets", "configmaps", "persistentvolumeclaims", "replicationcontrollers", "resourcequotas":
		return name, true
	}
	return "", false
}
