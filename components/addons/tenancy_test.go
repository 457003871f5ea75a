package addons

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/clusterforge/clusterforge/components/machine"
)

// Every add-on pod is admitted at its namespace's Pod Security level, as upstream's own evaluator
// judges it: the level its Namespace is labelled with, the cluster default elsewhere. kube-system
// is exempt; the pods there that need the exemption are listed (and must need it), and every
// other one must fit the default, so none starts needing the host unnoticed.
func TestEveryAddonPodFitsItsNamespacesPodSecurityLevel(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The kube-system pods that need the host: /dev/kmsg, the host network and nftables, the
	// kubelet's device plugin socket.
	needHost := []string{NodeProblemDetectorName, OpsAgentName, NvidiaDevicePluginName}
	for name, c := range stacks(t) {
		objs := objectsOf(t, c)
		version, err := psaapi.ParseVersion(machine.PodSecurityVersion(c))
		if err != nil {
			t.Fatal(err)
		}
		levels := map[string]psaapi.Level{}
		for _, o := range objs {
			if ns, ok := o.(*corev1.Namespace); ok {
				levels[ns.Name] = psaapi.Level(ns.Labels[psaapi.EnforceLevelLabel])
			}
		}
		for _, o := range objs {
			template := PodTemplate(o)
			if template == nil {
				continue
			}
			level, labelled := levels[o.GetNamespace()]
			switch {
			case slices.Contains(machine.PodSecurityExempt, o.GetNamespace()) && slices.Contains(needHost, o.GetName()):
				if allowed(evaluator.EvaluatePod(psaapi.LevelVersion{Level: machine.PodSecurityDefault, Version: version}, &template.ObjectMeta, &template.Spec)) {
					t.Errorf("%s: %s is listed as needing the host but fits %s", name, Key(o), machine.PodSecurityDefault)
				}
				continue
			case slices.Contains(machine.PodSecurityExempt, o.GetNamespace()), !labelled:
				level = machine.PodSecurityDefault
			}
			for _, r := range evaluator.EvaluatePod(psaapi.LevelVersion{Level: level, Version: version}, &template.ObjectMeta, &template.Spec) {
				if !r.Allowed {
					t.Errorf("%s: %s is not %s: %s: %s", name, Key(o), level, r.ForbiddenReason, r.ForbiddenDetail)
				}
			}
		}
	}
}

func allowed(results []policy.CheckResult) bool {
	for _, r := range results {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// A name cannot end the CEL literal it is quoted into: a quote, a backslash or a line break is
// escaped, as CEL's single-quoted strings read them.
func TestQuoteEscapesWhatWouldEndTheLiteral(t *testing.T) {
	for in, want := range map[string]string{
		"urgent":                    `'urgent'`,
		"a', 'system-node-critical": `'a\', \'system-node-critical'`,
		`a\`:                        `'a\\'`,
		"a\n":                       `'a\n'`,
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}
