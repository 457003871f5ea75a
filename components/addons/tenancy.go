package addons

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Admission policies that hold a team to its namespace and its nodes.
const (
	// TeamNamespacePolicy holds every team namespace to the restricted Pod Security level.
	TeamNamespacePolicy = "clusterforge-team-namespaces"
	// TeamPlacementPolicy holds a team's pods to the nodes the scheduler may give the team.
	TeamPlacementPolicy = "clusterforge-team-placement"
)

// TeamNamespaceLabels are the labels of team's namespace: the team (quotas, tolerations, L17) and
// the restricted Pod Security level, which TeamNamespacePolicy requires of every team namespace.
func TeamNamespaceLabels(team string) map[string]string {
	return map[string]string{wellknown.TeamKey: team, psaapi.EnforceLevelLabel: string(psaapi.LevelRestricted)}
}

// ForbiddenTolerations are the taints a team's pod may not tolerate: the marks of nodes on their
// way out or not yet tested, and the cordon.
var ForbiddenTolerations = []string{wellknown.PreflightTaint, wellknown.ReplaceTaint, wellknown.AutoscalerDeletionTaint,
	corev1.TaintNodeUnschedulable}

// namespace is a Namespace at a Pod Security level.
func namespace(name string, level psaapi.Level) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{psaapi.EnforceLevelLabel: string(level)}}}
}

// tenancy is the admission policies of team namespaces and their pods. Teams are enforced here,
// in the apiserver, not in the team webhook: a webhook that is down admits (it must, or no pod
// could start), and it would need the controller's node cache to judge a node name.
func tenancy(*spec.Cluster) []Object {
	labels := "object.metadata.?labels.orValue({})"
	objs := admissionPolicy(TeamNamespacePolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"namespaces"}, admissionregistrationv1.Create, admissionregistrationv1.Update)},
		[]admissionregistrationv1.MatchCondition{{Name: "team-namespaces", Expression: quote(wellknown.TeamKey) + " in " + labels}},
		nil,
		admissionregistrationv1.Validation{
			Expression: labels + "[?" + quote(psaapi.EnforceLevelLabel) + "].orValue('') == " + quote(string(psaapi.LevelRestricted)),
			Message:    "a team namespace enforces the restricted Pod Security level: label it " + psaapi.EnforceLevelLabel + "=" + string(psaapi.LevelRestricted),
		})

	forbidden := make([]string, len(ForbiddenTolerations))
	for i, key := range ForbiddenTolerations {
		forbidden[i] = quote(key)
	}
	teamPods := admissionregistrationv1.MatchResources{
		ResourceRules: rules([]string{"pods"}, admissionregistrationv1.Create, admissionregistrationv1.Update),
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: wellknown.TeamKey, Operator: metav1.LabelSelectorOpExists}}},
	}
	return append(objs, admissionPolicy(TeamPlacementPolicy, teamPods, nil,
		[]admissionregistrationv1.Variable{
			{Name: "team", Expression: "namespaceObject.metadata.labels[" + quote(wellknown.TeamKey) + "]"},
			{Name: "tolerations", Expression: "object.spec.?tolerations.orValue([])"},
		},
		admissionregistrationv1.Validation{
			// The binding is a subresource: only a pod created with its node set names one.
			Expression: "request.operation != 'CREATE' || object.spec.?nodeName.orValue('') == ''",
			Message:    "a team's pod may not name its node: the scheduler places it on the team's nodes or shared ones",
		},
		admissionregistrationv1.Validation{
			Expression: "variables.tolerations.all(t, t.?key.orValue('') != '')",
			Message:    "a team's pod may not tolerate every taint: each toleration names its key",
		},
		admissionregistrationv1.Validation{
			Expression: "variables.tolerations.all(t, t.?key.orValue('') != " + quote(wellknown.TeamKey) + " || " +
				"(t.?operator.orValue('Equal') == 'Equal' && t.?value.orValue('') == variables.team) || " +
				"(t.?operator.orValue('') == 'Exists' && object.spec.?priorityClassName.orValue('') == " + quote(wellknown.BorrowPriority) + "))",
			Message: "a team's pod may tolerate only its own team's taint, or every team's at the " + wellknown.BorrowPriority + " priority",
		},
		admissionregistrationv1.Validation{
			Expression: "variables.tolerations.all(t, !(t.?key.orValue('') in [" + strings.Join(forbidden, ", ") + "]))",
			Message:    "a team's pod may not tolerate " + strings.Join(ForbiddenTolerations, ", "),
		},
	)...)
}

// admissionPolicy is a ValidatingAdmissionPolicy that denies what fails a validation, and its
// binding. Every refusal is Forbidden.
func admissionPolicy(name string, match admissionregistrationv1.MatchResources, conditions []admissionregistrationv1.MatchCondition,
	variables []admissionregistrationv1.Variable, validations ...admissionregistrationv1.Validation) []Object {
	fail := admissionregistrationv1.Fail
	for i := range validations {
		validations[i].Reason = ptr(metav1.StatusReasonForbidden)
	}
	return []Object{
		&admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail, MatchConstraints: &match,
				MatchConditions: conditions, Variables: variables, Validations: validations},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
		},
	}
}

// rules match the core resources for the operations.
func rules(resources []string, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: ops, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources}}}}
}

// quote is a CEL string literal of a label, taint or class name (none holds a quote).
func quote(s string) string { return "'" + s + "'" }
