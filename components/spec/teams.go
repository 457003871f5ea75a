package spec

import (
	"math"
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

// Footprint is the most of etcd-main one team namespace can hold: each kind its quota bounds the
// stored objects of (StoredKind), times the largest object of that kind. A kind bounded under two
// names counts at the lower limit, as the apiservers enforce both; the sum saturates.
func (t Teams) Footprint() int64 {
	counts := map[string]int64{}
	for name, hard := range t.Quota {
		kind, counted := StoredKind(name)
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
		bytes := t.ObjectBytes(plural)
		if bytes > 0 && n > (math.MaxInt64-total)/bytes {
			return math.MaxInt64
		}
		total += n * bytes
	}
	return total
}

// StoredKind is the kind (plural[.group]) whose stored objects a quota name bounds: count/<kind>,
// or one of the standard names that count objects. Not "pods", which counts only the pods not
// yet finished or deleted; a finished pod, or one a finalizer holds, stays in etcd uncounted.
func StoredKind(name string) (string, bool) {
	if kind, ok := strings.CutPrefix(name, "count/"); ok {
		return kind, true
	}
	switch name {
	case "services", "secrets", "configmaps", "persistentvolumeclaims", "replicationcontrollers", "resourcequotas":
		return name, true
	}
	return "", false
}
