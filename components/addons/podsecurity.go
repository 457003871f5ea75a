package addons

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// TeamNamespacePolicy names the admission policy that holds every team namespace to the
// restricted Pod Security level.
const TeamNamespacePolicy = "clusterforge-team-namespaces"

// TeamNamespaceLabels are the labels of team's namespace: the team (quotas, tolerations, L17) and
// the restricted Pod Security level, which TeamNamespacePolicy requires of every team namespace.
func TeamNamespaceLabels(team string) map[string]string {
	return map[string]string{wellknown.TeamKey: team, psaapi.EnforceLevelLabel: string(psaapi.LevelRestricted)}
}

// namespace is a Namespace at a Pod Security level.
func namespace(name string, level psaapi.Level) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{psaapi.EnforceLevelLabel: string(level)}}}
}

// podSecurity is the admission policy that keeps team namespaces restricted: a namespace labelled
// with a team must enforce restricted, so a label change cannot open host access to a team.
func podSecurity(*spec.Cluster) []Object {
	fail := admissionregistrationv1.Fail
	labels := "object.metadata.?labels.orValue({})"
	return []Object{
		&admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: TeamNamespacePolicy},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: &fail,
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"namespaces"}}}}}},
				MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "team-namespaces",
					Expression: "'" + wellknown.TeamKey + "' in " + labels}},
				Validations: []admissionregistrationv1.Validation{{
					Expression: labels + "[?'" + psaapi.EnforceLevelLabel + "'].orValue('') == '" + string(psaapi.LevelRestricted) + "'",
					Message:    "a team namespace enforces the restricted Pod Security level: label it " + psaapi.EnforceLevelLabel + "=" + string(psaapi.LevelRestricted),
					Reason:     ptr(metav1.StatusReasonForbidden),
				}},
			},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: TeamNamespacePolicy},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: TeamNamespacePolicy,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
		},
	}
}
