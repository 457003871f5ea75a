package spec

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// SupportWarnDays is how close to its end of support a release is warned about.
const SupportWarnDays = 60

// ReleaseSupport is one pinned component's release and what its upstream still gives it on a day.
type ReleaseSupport struct {
	Key, Version string
	// Status says so in a line: supported until a date, under a policy, or past its end.
	Status string
	// Warn is set past the end of support or within SupportWarnDays of it, and for a release
	// whose line versions.yaml knows nothing of.
	Warn bool
}

// SupportStatus is the upstream support of every release c's machines and add-ons run, on today.
func (c *Cluster) SupportStatus(today time.Time) []ReleaseSupport {
	vs := c.Versions
	var out []ReleaseSupport
	for _, f := range []struct{ key, value string }{
		{"kubernetes", vs.Kubernetes}, {"etcd", vs.Etcd}, {"containerd", vs.Containerd}, {"runc", vs.Runc},
		{"crictl", vs.Crictl}, {"azureCNI", vs.AzureCNI}, {"coreDNS", vs.CoreDNS}, {"clusterAutoscaler", vs.ClusterAutoscaler},
		{"prometheus", vs.Prometheus}, {"nodeExporter", vs.NodeExporter}, {"nodeProblemDetector", vs.NodeProblemDetector},
		{"nvidiaDevicePlugin", vs.NvidiaDevicePlugin}, {"nvidiaContainerToolkit", NvidiaContainerToolkitVersion},
		{"cniPlugins", pinned("cniPlugins")},
	} {
		out = append(out, releaseSupport(f.key, f.value, today))
	}
	if vs.WorkersHeld() {
		out = append(out, releaseSupport("kubelet", vs.Kubelet, today))
	}
	return out
}

func releaseSupport(key, v string, today time.Time) ReleaseSupport {
	r := ReleaseSupport{Key: key, Version: v}
	s, known := SupportOf(supportKey(key), v)
	end, dated := s.End()
	days := int(end.Sub(today).Hours() / 24)
	switch {
	case !known:
		r.Status, r.Warn = "no support facts for its line in versions.yaml", true
	case semver.Compare(v, s.Floor) < 0:
		r.Status, r.Warn = fmt.Sprintf("below its line's floor %s: %s", s.Floor, strings.Join(s.CVEs, "; ")), true
	case !dated:
		r.Status = "no published end date: " + s.Policy
	case days < 0:
		r.Status, r.Warn = fmt.Sprintf("PAST its end of support on %s", s.EndOfSupport), true
	case days <= SupportWarnDays:
		r.Status, r.Warn = fmt.Sprintf("supported until %s, %d days from now: plan the move", s.EndOfSupport, days), true
	default:
		r.Status = "supported until " + s.EndOfSupport
	}
	return r
}
