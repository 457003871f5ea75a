// Package teams gives each team a quota of whole nodes and lets others borrow them while idle
// (L17), as the seeds' team-resource-manager did: a ConfigMap of allocations (node selector,
// team, node count) becomes a `clusterforge.io/team=<team>:NoSchedule` taint on that many
// matching nodes; an admission webhook gives a team's pods the toleration for their own nodes,
// and pods of the borrow priority class a toleration for every team's. The scheduler's own
// priority preemption gives a borrowed node back when its owner's pods arrive.
package teams

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/clusterforge/clusterforge/components/wellknown"
	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// TaintKey marks a node owned by the team in its value; pods need the toleration to land there.
	TaintKey = wellknown.TeamKey
	// NamespaceLabel names the team a namespace's pods belong to.
	NamespaceLabel = TaintKey
	// ConfigMapName is the allocations' ConfigMap, in kube-system; ConfigMapKey its entry.
	ConfigMapName = "clusterforge-teams"
	ConfigMapKey  = "allocations.yaml"
)

// Allocation is one line of the ConfigMap: Nodes of the nodes NodeSelector matches belong to Team.
type Allocation struct {
	// Team is a label value: the taint's value and the namespaces' label.
	Team string `yaml:"team"`
	// NodeSelector picks the nodes to allocate from, by label equality (usually the pool label).
	NodeSelector map[string]string `yaml:"nodeSelector"`
	// Nodes is how many whole nodes the team owns, 0 or more.
	Nodes int `yaml:"nodes"`
}

// ParseAllocations reads the ConfigMap's entry strictly; every problem names its line's team and field.
func ParseAllocations(data string) ([]Allocation, error) {
	var out []Allocation
	dec := yaml.NewDecoder(strings.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&out); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s/%s: %w", ConfigMapName, ConfigMapKey, err)
	}
	var errs []error
	for i, a := range out {
		at := fmt.Sprintf("%s/%s[%d]", ConfigMapName, ConfigMapKey, i)
		for _, msg := range validation.IsValidLabelValue(a.Team) {
			errs = append(errs, fmt.Errorf("%s.team %q: %s", at, a.Team, msg))
		}
		if a.Team == "" {
			errs = append(errs, fmt.Errorf("%s.team: name the team", at))
		}
		if len(a.NodeSelector) == 0 {
			errs = append(errs, fmt.Errorf("%s.nodeSelector: pick the nodes, e.g. {%s: <pool>}", at, wellknown.PoolLabel))
		}
		if _, err := labels.ValidatedSelectorFromSet(a.NodeSelector); err != nil {
			errs = append(errs, fmt.Errorf("%s.nodeSelector: %w", at, err))
		}
		if a.Nodes < 0 {
			errs = append(errs, fmt.Errorf("%s.nodes %d: a team owns 0 or more nodes", at, a.Nodes))
		}
	}
	return out, errors.Join(errs...)
}

// TeamOf is the team whose taint the node carries, or "".
func TeamOf(n *corev1.Node) string {
	for _, t := range n.Spec.Taints {
		if t.Key == TaintKey {
			return t.Value
		}
	}
	return ""
}

// Owners decides which team owns which node: allocations in order, each taking its count from
// the matching nodes not yet given away, the nodes it already owns first (no churn when nothing
// changed), then unowned ones, then another team's, each group by name. A node in no result is
// shared. The system pool's nodes are no team's, whatever an allocation selects: a team's taint
// there would keep the platform's own pods off. Short allocations (too few matching nodes) are
// reported, not fatal.
func Owners(allocs []Allocation, nodes []*corev1.Node) (map[string]string, []error) {
	owners := map[string]string{}
	var short []error
	for _, a := range allocs {
		selector := labels.SelectorFromSet(a.NodeSelector)
		var candidates []*corev1.Node
		for _, n := range nodes {
			if _, taken := owners[n.Name]; !taken && !system(n) && selector.Matches(labels.Set(n.Labels)) {
				candidates = append(candidates, n)
			}
		}
		rank := func(n *corev1.Node) int {
			switch TeamOf(n) {
			case a.Team:
				return 0
			case "":
				return 1
			}
			return 2
		}
		slices.SortFunc(candidates, func(x, y *corev1.Node) int {
			return cmp.Or(cmp.Compare(rank(x), rank(y)), cmp.Compare(x.Name, y.Name))
		})
		if len(candidates) < a.Nodes {
			short = append(short, fmt.Errorf("team %s: %d nodes allocated, %d match %v", a.Team, a.Nodes, len(candidates), a.NodeSelector))
		}
		for _, n := range candidates[:min(a.Nodes, len(candidates))] {
			owners[n.Name] = a.Team
		}
	}
	return owners, short
}

// system says whether the node is the system pool's, by the taint it registers with.
func system(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == wellknown.SystemTaint })
}

// WithOwner returns the node's taints with the team's taint set to owner ("" removes it), and
// whether they changed.
func WithOwner(n *corev1.Node, owner string) ([]corev1.Taint, bool) {
	if TeamOf(n) == owner {
		return n.Spec.Taints, false
	}
	taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == TaintKey })
	if owner != "" {
		taints = append(taints, corev1.Taint{Key: TaintKey, Value: owner, Effect: corev1.TaintEffectNoSchedule})
	}
	return taints, true
}
