// Package gangs holds a gang's pods behind the gang-room scheduling gate (wellknown.GangRoomGate)
// until one gang domain could hold the whole gang at its scale sets' full size, and says why on the
// PodGroup while none can. cluster-autoscaler does not know gangs: for pending pods that no group
// can hold together it grows the group that holds most of them, to its maximum, and the gang still
// cannot start. Gated pods are invisible to it and to the scheduler.
//
// The judgement fails open where the template nodes cannot answer (the kubelet's own labels, a
// resource no pool offers by name): that does not hold a gang back, and the scheduler still judges
// it against the real nodes.
package gangs

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Domain is one gang domain (wellknown.GangDomainLabel) at full size: as many nodes as its scale
// sets may hold, each as one of its template nodes (one a zone) says. What the DaemonSets take of a
// node is not counted, so a gang within a few pods of a domain's size may pass and wait at the
// scheduler.
type Domain struct {
	Name     string
	MaxNodes int
	// nodes are the template node in each of its zones.
	nodes []*corev1.Node
	// modelled are the resources some domain offers by name: a request for any other is not judged.
	modelled map[corev1.ResourceName]bool
}

// ParseDomains reads the stack's gang domains (machine.GangDomainShapes, as JSON: clusterforge-ops's
// --gang-domains).
func ParseDomains(flag string) ([]Domain, error) {
	var shapes []spec.GangDomainShape
	if err := json.Unmarshal([]byte(flag), &shapes); err != nil {
		return nil, err
	}
	return Domains(shapes)
}

// Domains makes the domains of shapes.
func Domains(shapes []spec.GangDomainShape) ([]Domain, error) {
	modelled := map[corev1.ResourceName]bool{corev1.ResourceCPU: true, corev1.ResourceMemory: true, corev1.ResourcePods: true}
	allocatable := make([]corev1.ResourceList, len(shapes))
	for i, s := range shapes {
		allocatable[i] = corev1.ResourceList{}
		for name, v := range s.Allocatable {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("gang domains: %s %q: %w", name, v, err)
			}
			allocatable[i][corev1.ResourceName(name)] = q
			modelled[corev1.ResourceName(name)] = true
		}
	}
	var out []Domain
	for i, s := range shapes {
		var taints []corev1.Taint
		for _, t := range s.Taints {
			taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
		}
		for _, d := range s.Domains {
			if d.Name == "" || d.MaxNodes < 0 {
				return nil, fmt.Errorf("gang domain %q of %d nodes: want a name and a node count", d.Name, d.MaxNodes)
			}
			domain := Domain{Name: d.Name, MaxNodes: d.MaxNodes, modelled: modelled}
			for _, zone := range append([]string{}, d.Zones...) {
				node := &corev1.Node{}
				node.Labels = maps.Clone(s.Labels)
				node.Labels[wellknown.GangDomainLabel], node.Labels[wellknown.ZoneLabel] = d.Name, zone
				node.Spec.Taints, node.Status.Allocatable = taints, allocatable[i]
				domain.nodes = append(domain.nodes, node)
			}
			if len(d.Zones) == 0 {
				node := &corev1.Node{}
				node.Labels = maps.Clone(s.Labels)
				node.Labels[wellknown.GangDomainLabel] = d.Name
				node.Spec.Taints, node.Status.Allocatable = taints, allocatable[i]
				domain.nodes = append(domain.nodes, node)
			}
			out = append(out, domain)
		}
	}
	return out, nil
}

// Verdict is whether a gang may go to the scheduler.
type Verdict struct {
	// Fits names a domain that could hold the whole gang; empty when none could.
	Fits string
	// Why says, when none could, how much of the gang the largest could hold.
	Why string
}

// Fit judges a gang from the pods it has made: it needs size of them (its PodGroup's minCount, or
// every pod it has made when that is more), the largest, and fits a domain when they pack onto the
// domain's MaxNodes nodes, first-fit, largest first. Pods the gang has not made yet count as copies
// of its largest. Like pods are packed by count, so a judgement costs the gang's kinds of pod and
// the domain's nodes, not its size.
func Fit(domains []Domain, pods []*corev1.Pod, size int) Verdict {
	if len(pods) == 0 {
		return Verdict{Why: "the gang has no pods yet"}
	}
	kinds := kindsOf(pods, max(size, len(pods)))
	total := 0
	for _, k := range kinds {
		total += k.count
	}
	best, bestHeld := "", -1
	for _, d := range domains {
		held := d.holds(kinds)
		if held == total {
			return Verdict{Fits: d.Name}
		}
		if held > bestHeld {
			best, bestHeld = d.Name, held
		}
	}
	if best == "" {
		return Verdict{Why: fmt.Sprintf("the gang of %d pods fits no gang domain: the cluster has none", total)}
	}
	return Verdict{Why: fmt.Sprintf("the gang of %d pods fits no gang domain (one InfiniBand placement group, or one pool off InfiniBand) even at its full size: "+
		"the most any holds is %d, in %s; make the gang smaller or its pods smaller, or let it span domains (schedulingConstraints: {})", total, bestHeld, best)}
}

// kind is like pods of a gang: the same requests and placement.
type kind struct {
	pod      *corev1.Pod
	requests corev1.ResourceList
	count    int
}

// kindsOf groups pods into kinds, largest first, the largest counted up to size pods.
func kindsOf(pods []*corev1.Pod, size int) []kind {
	var kinds []kind
	keys := map[string]int{}
	for _, p := range pods {
		r := requests(p)
		placement, _ := json.Marshal([]any{r, p.Spec.NodeSelector, p.Spec.Affinity, p.Spec.Tolerations})
		if i, ok := keys[string(placement)]; ok {
			kinds[i].count++
			continue
		}
		keys[string(placement)] = len(kinds)
		kinds = append(kinds, kind{pod: p, requests: r, count: 1})
	}
	slices.SortStableFunc(kinds, func(a, b kind) int { return compareRequests(b.requests, a.requests) })
	kinds[0].count += size - len(pods)
	return kinds
}

// holds is how many of the kinds' pods, in order, the domain's nodes take before one does not.
func (d Domain) holds(kinds []kind) int {
	held, used := 0, 0
	var partial []corev1.ResourceList // nodes with room left
	for _, k := range kinds {
		if !d.admits(k.pod) {
			return held
		}
		left := k.count
		for _, free := range partial {
			m := min(left, d.fits(free, k.requests))
			d.take(free, k.requests, m)
			left -= m
		}
		empty := d.nodes[0].Status.Allocatable
		per := d.fits(empty, k.requests)
		if per == 0 {
			return held + k.count - left
		}
		need := (left + per - 1) / per
		if need > d.MaxNodes-used {
			return held + k.count - left + (d.MaxNodes-used)*per
		}
		if last := left - (need-1)*per; need > 0 && last < per {
			free := empty.DeepCopy()
			d.take(free, k.requests, last)
			partial = append(partial, free)
		}
		used += need
		held += k.count
	}
	return held
}

// fits is how many pods of requests a node with free takes. Every request holds a pod slot, which
// every domain models, so the count is bounded.
func (d Domain) fits(free, requests corev1.ResourceList) int {
	n := math.MaxInt
	for name, q := range requests {
		if q.IsZero() || !d.modelled[name] {
			continue
		}
		f := free[name]
		n = min(n, int(max(f.MilliValue(), 0)/q.MilliValue()))
	}
	return n
}

// take subtracts n pods of requests from free.
func (d Domain) take(free, requests corev1.ResourceList, n int) {
	for name, q := range requests {
		if d.modelled[name] {
			f := free[name]
			f.Sub(*resource.NewMilliQuantity(q.MilliValue()*int64(n), q.Format))
			free[name] = f
		}
	}
}

// admits is the scheduler's placement filters a template node can answer, in any of the domain's
// zones: the pod's node selector and required affinity on the labels the template carries, and the
// taints it must tolerate.
func (d Domain) admits(p *corev1.Pod) bool {
	for _, node := range d.nodes {
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(onLabelsOf(p, node.Labels)).Match(node); !ok {
			continue
		}
		_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, p.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
		if !untolerated {
			return true
		}
	}
	return false
}

// unjudged are labels a node may carry that its template does not model: the kubelet's own and
// the older forms of the ones the CSR approver sets. A requirement on one is taken to hold.
var unjudged = map[string]bool{corev1.LabelHostname: true, corev1.LabelInstanceType: true, corev1.LabelInstanceTypeStable: true,
	corev1.LabelFailureDomainBetaZone: true, corev1.LabelFailureDomainBetaRegion: true, "beta.kubernetes.io/os": true, "beta.kubernetes.io/arch": true}

// onLabelsOf is the pod with only the node selector and required node affinity labels can answer:
// a requirement on an unjudged label the template does not carry, or on a field, is taken to hold.
// Any other label the template lacks, its nodes lack too.
func onLabelsOf(p *corev1.Pod, labels map[string]string) *corev1.Pod {
	judged := func(key string) bool { _, ok := labels[key]; return ok || !unjudged[key] }
	out := &corev1.Pod{}
	for k, v := range p.Spec.NodeSelector {
		if judged(k) {
			if out.Spec.NodeSelector == nil {
				out.Spec.NodeSelector = map[string]string{}
			}
			out.Spec.NodeSelector[k] = v
		}
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var terms []corev1.NodeSelectorTerm
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			var kept []corev1.NodeSelectorRequirement
			for _, r := range term.MatchExpressions {
				if judged(r.Key) {
					kept = append(kept, r)
				}
			}
			if len(kept) == 0 {
				return out // a term that asks nothing the template answers may hold: so may the affinity
			}
			terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: kept})
		}
		out.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	return out
}

// requests is what the scheduler counts of a pod, one pod slot included.
func requests(p *corev1.Pod) corev1.ResourceList {
	r := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	r[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	return r
}

// compareRequests orders requests by their extended resources (GPUs), by name, then CPU, then
// memory.
func compareRequests(a, b corev1.ResourceList) int {
	var extended []corev1.ResourceName
	for name := range maps.Keys(a) {
		if strings.Contains(string(name), "/") {
			extended = append(extended, name)
		}
	}
	for name := range maps.Keys(b) {
		if strings.Contains(string(name), "/") && !slices.Contains(extended, name) {
			extended = append(extended, name)
		}
	}
	slices.Sort(extended)
	for _, name := range append(extended, corev1.ResourceCPU, corev1.ResourceMemory) {
		qa, qb := a[name], b[name]
		if c := qa.Cmp(qb); c != 0 {
			return c
		}
	}
	return 0
}
