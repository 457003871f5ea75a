package addons

import "github.com/clusterforge/clusterforge/components/spec"

// BuiltImage is an add-on image clusterforge builds from the pinned source instead of pulling it:
// one static binary at Path, its entrypoint, as the upstream image places it. images/cmd/mkimages
// writes them and every worker image preloads them, so no add-on pod pulls.
type BuiltImage struct {
	// Ref is the reference the add-on's pods name.
	Ref string
	// Binary is the toolchain's build, relative to .tools (scripts/toolchain.sh addons).
	Binary string
	// Path is where the image keeps the binary: its entrypoint.
	Path string
}

// Images of the add-ons, one per built image.
func coreDNSImage(c *spec.Cluster) BuiltImage {
	return BuiltImage{"registry.k8s.io/coredns/coredns:" + c.Versions.CoreDNS, "addons/coredns", "/coredns"}
}

func prometheusImage(c *spec.Cluster) BuiltImage {
	return BuiltImage{"quay.io/prometheus/prometheus:" + c.Versions.Prometheus, "addons/prometheus", "/bin/prometheus"}
}

func nodeExporterImage(c *spec.Cluster) BuiltImage {
	return BuiltImage{"quay.io/prometheus/node-exporter:" + c.Versions.NodeExporter, "addons/node_exporter", "/bin/node_exporter"}
}

// BuiltImages are every add-on image clusterforge builds. cluster-autoscaler's is pulled: it runs
// on the system pool only and needs Azure's API to do anything.
func BuiltImages(c *spec.Cluster) []BuiltImage {
	return []BuiltImage{coreDNSImage(c), prometheusImage(c), nodeExporterImage(c), nodeProblemDetectorImage(c), opsImage()}
}
