package spec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clusterforge/clusterforge/components/wellknown"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and taints land in the kubelet's --node-labels flag and its registerWithTaints, and are
// checked here with the functions the kubelet and the apiserver use (k8s.io/apimachinery).

// kubeletOwnedLabels are set by the kubelet or the cloud on every node; a pool setting them would
// lie about a node's name, zone or size (and break anti-affinity on kubernetes.io/hostname).
var kubeletOwnedLabels = []string{
	"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
	"topology.kubernetes.io/zone", "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
	"failure-domain.beta.kubernetes.io/region", "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
}

// kubeletLabelNamespaces are the kubernetes.io namespaces a kubelet may set on its own node
// (k8s.io/kubernetes/pkg/kubelet/apis.IsKubeletLabel); it refuses to start with any other
// kubernetes.io or k8s.io label in --node-labels.
var kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}

// inNamespace reports whether key's prefix is ns or a subdomain of it.
func inNamespace(key, ns string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	return ok && (prefix == ns || strings.HasSuffix(prefix, "."+ns))
}

func kubernetesNamespace(key string) bool {
	return inNamespace(key, "kubernetes.io") || inNamespace(key, "k8s.io")
}

func (v *validator) nodeLabel(field, key, value string) {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		v.fail(field, "use a Kubernetes label key such as example.com/team", "key %s: %s", Excerpt(key), errs[0])
		return
	}
	switch {
	case key == wellknown.PoolLabel, key == wellknown.GPULabel, slices.Contains(kubeletOwnedLabels, key):
		v.fail(field, "remove it: clusterforge, the kubelet or Azure sets it on every node", "%s is reserved", key)
	case kubernetesNamespace(key) && !slices.ContainsFunc(kubeletLabelNamespaces, func(ns string) bool { return inNamespace(key, ns) }):
		v.fail(field, "use your own prefix, e.g. example.com/, or node.kubernetes.io/: the kubelet refuses other kubernetes.io and k8s.io labels",
			"%s is in a namespace the kubelet may not set", key)
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		v.fail(field, "use at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit", "value %s: %s", Excerpt(value), errs[0])
	}
}

// taintEffects are the effects a node taint may have.
var taintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

func (v *validator) nodeTaint(field string, t Taint) {
	if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
		v.fail(field+".key", "use a Kubernetes key such as example.com/dedicated", "%s: %s", Excerpt(t.Key), errs[0])
	} else if kubernetesNamespace(t.Key) {
		v.fail(field+".key", "use your own prefix, e.g. example.com/: kubernetes.io and k8s.io taints belong to Kubernetes' controllers", "%s is reserved", t.Key)
	} else if strings.HasPrefix(t.Key, "clusterforge.io/") {
		v.fail(field+".key", "use your own prefix, e.g. example.com/: clusterforge.io taints belong to its controllers (team quotas, preflight, remediation)", "%s is reserved", t.Key)
	}
	if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
		v.fail(field+".value", "use at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit", "%s: %s", Excerpt(t.Value), errs[0])
	}
	if !slices.Contains(taintEffects, t.Effect) {
		v.fail(field+".effect", "use "+strings.Join(taintEffects, ", "), "%s is not a taint effect", Excerpt(t.Effect))
	}
}

// poolLabelsAndTaints checks one pool's labels and taints.
func (v *validator) poolLabelsAndTaints(field string, p Pool) {
	for _, k := range sortedKeys(p.Labels) {
		v.nodeLabel(fmt.Sprintf("%s.labels[%s]", field, MapKey(k)), k, p.Labels[k])
	}
	seen := map[string]bool{}
	for j, t := range p.Taints {
		tf := fmt.Sprintf("%s.taints[%d]", field, j)
		v.nodeTaint(tf, t)
		if id := t.Key + ":" + t.Effect; seen[id] {
			v.fail(tf, "give each key and effect once", "taint %s is listed twice", Excerpt(id))
		} else {
			seen[id] = true
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
