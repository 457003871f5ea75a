package addons

import (
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Admission policies that hold a team to its namespace and its nodes.
const (
	// TeamNamespacePolicy holds every team namespace to the restricted Pod Security level.
	TeamNamespacePolicy = "clusterforge-team-namespaces"
	// TeamPlacementPolicy holds a team's pods to the nodes the scheduler may give the team.
	TeamPlacementPolicy = "clusterforge-team-placement"
	// TeamGangPolicy holds a team's gangs (PodGroups, and the Workloads that template them) to the
	// priority classes its pods may run at: the scheduler orders and preempts a gang at its
	// PodGroup's priority, not its pods'.
	TeamGangPolicy = "clusterforge-team-gangs"
	// GangDomainPolicy keeps a gang within one gang domain (wellknown.GangDomainLabel) unless its
	// PodGroup says otherwise.
	GangDomainPolicy = "clusterforge-gang-domain"
	// GangRoomPolicy gates every gang's pod when it is made (a mutating policy) and lets only
	// clusterforge-ops lift the gate, changing nothing else of the pod (a validating one).
	GangRoomPolicy = "clusterforge-gang-room"
)

// TeamNamespaceLabels are the labels of team's namespace: the team (quotas, tolerations, L17) and
// the restricted Pod Security level, which TeamNamespacePolicy requires of every team namespace.
func TeamNamespaceLabels(team string) map[string]string {
	return map[string]string{wellknown.TeamKey: team, psaapi.EnforceLevelLabel: string(psaapi.LevelRestricted)}
}

// Taints a team's pod may tolerate besides its team's: the node controller's not-ready and
// unreachable ones for at most NotReadyToleranceSeconds (the apiserver gives every pod those), and
// the GPU taint when it asks for GPUs.
const NotReadyToleranceSeconds = 300

// TenantPriorityClasses are the classes a team's pod may run at: the default, the borrow class
// and the stack's own (teams.priorityClasses).
func TenantPriorityClasses(c *spec.Cluster) []string {
	out := []string{DefaultPriority, wellknown.BorrowPriority}
	for _, pc := range c.Teams.PriorityClasses {
		out = append(out, pc.Name)
	}
	return out
}

// namespace is a Namespace at a Pod Security level.
func namespace(name string, level psaapi.Level) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{psaapi.EnforceLevelLabel: string(level)}}}
}

// tenancy is the admission policies of team namespaces and their pods. Teams are enforced here,
// in the apiserver, not in the team webhook: a webhook that is down admits (it must, or no pod
// could start), and it would need the controller's node cache to judge a node name.
func tenancy(c *spec.Cluster) []Object {
	labels := "object.metadata.?labels.orValue({})"
	objs := admissionPolicy(TeamNamespacePolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"namespaces"}, admissionregistrationv1.Create, admissionregistrationv1.Update)},
		[]admissionregistrationv1.MatchCondition{{Name: "team-namespaces", Expression: quote(wellknown.TeamKey) + " in " + labels}},
		nil,
		admissionregistrationv1.Validation{
			Expression: labels + "[?" + quote(psaapi.EnforceLevelLabel) + "].orValue('') == " + quote(string(psaapi.LevelRestricted)),
			Message:    "a team namespace enforces the restricted Pod Security level: label it " + psaapi.EnforceLevelLabel + "=" + string(psaapi.LevelRestricted),
		})

	// Probes and lifecycle hooks that name a host are sent by the kubelet from the node's own
	// network, past the metadata guard. Pod Security's restricted level refuses them too (from
	// v1.34); this holds whatever level a namespace is labelled.
	var hostless []string
	for _, handler := range []string{"livenessProbe", "readinessProbe", "startupProbe", "lifecycle.?postStart", "lifecycle.?preStop"} {
		for _, action := range []string{"httpGet", "tcpSocket"} {
			hostless = append(hostless, "c.?"+handler+".?"+action+".?host.orValue('') == ''")
		}
	}
	required := "object.spec.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution.?nodeSelectorTerms.orValue([])"
	teamPods := admissionregistrationv1.MatchResources{
		ResourceRules: rules([]string{"pods"}, admissionregistrationv1.Create, admissionregistrationv1.Update),
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: wellknown.TeamKey, Operator: metav1.LabelSelectorOpExists}}},
	}
	objs = append(objs, teamGangs(c)...)
	if machine.GangScheduling(c) { // the policy's API and the PodGroup's field come with gangs
		objs = append(objs, gangDomain()...)
		objs = append(objs, gangRoom()...)
	}
	return append(objs, admissionPolicy(TeamPlacementPolicy, teamPods, nil,
		[]admissionregistrationv1.Variable{
			{Name: "team", Expression: "namespaceObject.metadata.labels[" + quote(wellknown.TeamKey) + "]"},
			// An update is judged by the tolerations it adds: a pod admitted earlier stays updatable.
			{Name: "tolerations", Expression: "request.operation == 'UPDATE' ? " +
				"object.spec.?tolerations.orValue([]).filter(t, !(t in oldObject.spec.?tolerations.orValue([]))) : object.spec.?tolerations.orValue([])"},
			{Name: "containers", Expression: "object.spec.containers + object.spec.?initContainers.orValue([])"},
			{Name: "gpu", Expression: "variables.containers.exists(c, " + quote(machine.GPUResource) + " in c.?resources.?limits.orValue({}) || " +
				quote(machine.GPUResource) + " in c.?resources.?requests.orValue({}))"},
			{Name: "podTerms", Expression: "object.spec.?affinity.?podAffinity.?requiredDuringSchedulingIgnoredDuringExecution.orValue([]) + " +
				"object.spec.?affinity.?podAntiAffinity.?requiredDuringSchedulingIgnoredDuringExecution.orValue([]) + " +
				"object.spec.?affinity.?podAffinity.?preferredDuringSchedulingIgnoredDuringExecution.orValue([]).map(w, w.podAffinityTerm) + " +
				"object.spec.?affinity.?podAntiAffinity.?preferredDuringSchedulingIgnoredDuringExecution.orValue([]).map(w, w.podAffinityTerm)"},
		},
		admissionregistrationv1.Validation{
			// The binding is a subresource: only a pod created with its node set names one.
			Expression: "request.operation != 'CREATE' || (object.spec.?nodeName.orValue('') == '' && " +
				"!(" + quote(corev1.LabelHostname) + " in object.spec.?nodeSelector.orValue({})) && " +
				required + ".all(term, size(term.?matchFields.orValue([])) == 0 && term.?matchExpressions.orValue([]).all(e, e.key != " + quote(corev1.LabelHostname) + ")))",
			Message: "a team's pod may not choose its node (by name or host name): the scheduler places it on the team's nodes or shared ones",
		},
		admissionregistrationv1.Validation{
			Expression: "request.operation != 'CREATE' || object.spec.?priorityClassName.orValue('') in " + quoteList(append([]string{""}, TenantPriorityClasses(c)...)...),
			Message:    "a team's pod runs at one of the priority classes " + strings.Join(TenantPriorityClasses(c), ", "),
		},
		admissionregistrationv1.Validation{
			Expression: "variables.tolerations.all(t, " +
				"(t.?key.orValue('') == " + quote(wellknown.TeamKey) + " && (" +
				"(t.?operator.orValue('Equal') == 'Equal' && t.?value.orValue('') == variables.team) || " +
				"(t.?operator.orValue('') == 'Exists' && object.spec.?priorityClassName.orValue('') == " + quote(wellknown.BorrowPriority) + "))) || " +
				"(t.?key.orValue('') == " + quote(machine.GPUResource) + " && variables.gpu) || " +
				"(t.?key.orValue('') in " + quoteList(corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable) + " && t.?effect.orValue('') == 'NoExecute' && " +
				"t.?tolerationSeconds.orValue(" + strconv.Itoa(NotReadyToleranceSeconds+1) + ") <= " + strconv.Itoa(NotReadyToleranceSeconds) + "))",
			Message: "a team's pod may tolerate only its own team's taint (every team's at the " + wellknown.BorrowPriority + " priority), " +
				"the GPU taint when it asks for GPUs, and not-ready or unreachable nodes for at most " + strconv.Itoa(NotReadyToleranceSeconds) + " s",
		},
		admissionregistrationv1.Validation{
			// Anti-affinity is symmetric: a term over other namespaces would keep other teams' pods,
			// gangs included, off every node or gang domain the team's pods sit in.
			Expression: "request.operation != 'CREATE' || variables.podTerms.all(t, !has(t.namespaceSelector) && " +
				"t.?namespaces.orValue([]).all(n, n == request.namespace))",
			Message: "a team's pod (anti-)affinity names only its own namespace's pods",
		},
		admissionregistrationv1.Validation{
			Expression: "variables.containers.all(c, " + strings.Join(hostless, " && ") + ")",
			Message:    "a team's probes and lifecycle hooks may not name a host: the kubelet would call it from the node",
		},
	)...)
}

// The PodGroup protection controller's identity and finalizer (kube-controller-manager runs it
// with a service account of its own): the finalizer keeps a PodGroup while its pods exist.
const (
	podGroupProtectionController = "system:serviceaccount:kube-system:podgroup-protection-controller"
	podGroupProtectionFinalizer  = "scheduling.k8s.io/podgroup-protection"
)

// teamGangs is TeamGangPolicy: every priority class a team's PodGroup or Workload names is one of
// TenantPriorityClasses (the apiserver's priority admission resolves the number from it), no
// Workload template sets a number of its own, and no team takes the protection finalizer off its
// PodGroup: a group deleted and made again while its pods run would give them its new priority.
func teamGangs(c *spec.Cluster) []Object {
	allowed := quoteList(append([]string{""}, TenantPriorityClasses(c)...)...)
	match := admissionregistrationv1.MatchResources{
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{wellknown.SchedulingGroup}, APIVersions: []string{"*"},
				Resources: []string{"podgroups", "workloads", "compositepodgroups"}}}}},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: wellknown.TeamKey, Operator: metav1.LabelSelectorOpExists}}},
	}
	finalizers := func(o string) string { return o + ".metadata.?finalizers.orValue([])" }
	return admissionPolicy(TeamGangPolicy, match,
		[]admissionregistrationv1.MatchCondition{{Name: "not-the-protection-controller",
			Expression: "request.userInfo.username != " + quote(podGroupProtectionController)}}, nil,
		admissionregistrationv1.Validation{
			// Composite groups nest templates deeper than one expression can follow; teams need none.
			Expression: "request.resource.resource != 'compositepodgroups' && object.spec.?priorityClassName.orValue('') in " + allowed + " && " +
				"object.spec.?podGroupTemplates.orValue([]).all(t, t.?priorityClassName.orValue('') in " + allowed + " && !has(t.priority)) && " +
				"size(object.spec.?compositePodGroupTemplates.orValue([])) == 0",
			Message: "a team's gangs run at one of the priority classes " + strings.Join(TenantPriorityClasses(c), ", ") + ", without composite groups",
		},
		admissionregistrationv1.Validation{
			Expression: "request.operation != 'UPDATE' || !(" + quote(podGroupProtectionFinalizer) + " in " + finalizers("oldObject") + ") || " +
				quote(podGroupProtectionFinalizer) + " in " + finalizers("object"),
			Message: "a team may not take " + podGroupProtectionFinalizer + " off its PodGroup: the controller does once its pods are gone",
		})
}

// gangDomain is GangDomainPolicy: a gang's PodGroup made without scheduling constraints gets a
// topology constraint on the gang domain, so the scheduler places the gang whole within one
// InfiniBand fabric (or, off InfiniBand, one pool) or leaves it waiting, marked unschedulable. A
// PodGroup that sets its own constraints, empty ones included, keeps them: that is how a job asks
// to span domains. Every namespace's, since a gang spread over fabrics is slow whoever runs it.
func gangDomain() []Object {
	fail := admissionregistrationv1.Fail
	match := admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{wellknown.SchedulingGroup}, APIVersions: []string{"*"}, Resources: []string{"podgroups"}}}}}}
	constraints := "Object.spec.schedulingConstraints"
	return []Object{
		&admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: GangDomainPolicy},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{FailurePolicy: &fail, MatchConstraints: &match,
				MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "gang-without-constraints",
					Expression: "has(object.spec.schedulingPolicy.gang) && !has(object.spec.schedulingConstraints)"}},
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
				// A JSON patch: an apply configuration may not set the topology list, which is atomic.
				Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeJSONPatch,
					JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "[JSONPatch{op: 'add', path: '/spec/schedulingConstraints', value: " +
						constraints + "{topology: [" + constraints + ".topology{key: " + quote(wellknown.GangDomainLabel) + "}]}}]"}}},
			},
		},
		&admissionregistrationv1.MutatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: GangDomainPolicy},
			Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: GangDomainPolicy},
		},
	}
}

// gangRoom is GangRoomPolicy: a gang's pod is made behind wellknown.GangRoomGate, labelled so
// clusterforge-ops watches gated pods alone, and only clusterforge-ops takes the gate off, with
// nothing else of the pod changed but the label. A pod bound at creation (nodeName) may carry no
// gate and skips the scheduler anyway.
func gangRoom() []Object {
	fail := admissionregistrationv1.Fail
	gate, label := quote(wellknown.GangRoomGate), quote(wellknown.GangRoomLabel)
	ops := quote(ServiceAccountUser(SystemNamespace, wellknown.OpsName))
	gates := func(o string) string { return o + ".spec.?schedulingGates.orValue([])" }
	labels := func(o string) string { return o + ".metadata.?labels.orValue({})" }
	same := func(field string) string { return "object." + field + " == oldObject." + field }
	mutating := []Object{
		&admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: GangRoomPolicy},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{FailurePolicy: &fail,
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"pods"}, admissionregistrationv1.Create)},
				MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "gang-pod-to-schedule",
					Expression: "has(object.spec.schedulingGroup) && has(object.spec.schedulingGroup.podGroupName) && !has(object.spec.nodeName)"}},
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{metadata: Object.metadata{labels: {" + label + ": " +
						quote(wellknown.GangRoomWaiting) + "}}, spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: " + gate + "}]}}"}}},
			},
		},
		&admissionregistrationv1.MutatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: GangRoomPolicy},
			Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: GangRoomPolicy},
		},
	}
	gated := func(o string) string { return gates(o) + ".exists(g, g.name == " + gate + ")" }
	labelled := func(o string) string { return label + " in " + labels(o) }
	breakGlass := "request.userInfo.groups.exists(g, g == " + quote(wellknown.BreakGlassGroup) + ")"
	validating := admissionPolicy(GangRoomPolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"pods"}, admissionregistrationv1.Create, admissionregistrationv1.Update)}, nil,
		[]admissionregistrationv1.Variable{
			{Name: "lifted", Expression: "request.operation == 'UPDATE' && " + gated("oldObject") + " && !" + gated("object")},
			{Name: "ops", Expression: "request.userInfo.username == " + ops},
		},
		admissionregistrationv1.Validation{
			Expression: "!variables.lifted || variables.ops || " + breakGlass,
			Message:    "only " + wellknown.OpsName + " lifts " + wellknown.GangRoomGate + ": it does once one gang domain can hold the whole gang",
		},
		// The controller watches gated pods by the label: a pod gated without it would never be
		// judged, and a label without the gate would fill its cache with pods it has nothing to do for.
		admissionregistrationv1.Validation{
			Expression: labelled("object") + " == " + gated("object") + " && (request.operation == 'CREATE' || variables.ops || " + breakGlass + " || " +
				labels("object") + "[?" + label + "] == " + labels("oldObject") + "[?" + label + "])",
			Message: wellknown.GangRoomLabel + " goes with the " + wellknown.GangRoomGate + " gate, and only " + wellknown.OpsName + " takes them off",
		},
		admissionregistrationv1.Validation{
			Expression: "!variables.ops || request.operation == 'CREATE' || (" + strings.Join([]string{
				gates("oldObject") + ".filter(g, g.name != " + gate + ") == " + gates("object"),
				labels("object") + ".all(k, k in " + labels("oldObject") + " && " + labels("oldObject") + "[k] == " + labels("object") + "[k])",
				labels("oldObject") + ".all(k, k == " + label + " || k in " + labels("object") + ")",
				same("spec.containers"), same("spec.?initContainers"), same("spec.?tolerations"), same("spec.?nodeSelector"),
				same("spec.?affinity"), same("spec.?activeDeadlineSeconds"), same("spec.?terminationGracePeriodSeconds"),
				same("metadata.?annotations"), same("metadata.?ownerReferences"), same("metadata.?finalizers"),
			}, " && ") + ")",
			Message: wellknown.OpsName + " may only take " + wellknown.GangRoomGate + " and its label off a pod",
		})
	return append(mutating, validating...)
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

// quote is a CEL string literal of a label, taint or class name.
func quote(s string) string { return "'" + celEscaper.Replace(s) + "'" }

// celEscaper escapes what would end or break a CEL single-quoted string: names from a stack
// (teams.priorityClasses) reach these expressions, validated, but quoted here all the same.
var celEscaper = strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\r", `\r`)

// quoteList is a CEL list of such string literals.
func quoteList(values ...string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = quote(v)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
