package addons

import (
	"maps"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// celEnv reads a policy's expressions as the apiserver's CEL does for what ours use: the request's
// objects untyped, optional fields (`.?`) and the standard macros.
func celEnv(t *testing.T) *cel.Env {
	env, err := cel.NewEnv(cel.OptionalTypes(),
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("request", cel.DynType),
		cel.Variable("namespaceObject", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Every expression of every admission policy parses and type-checks under CEL itself, so a literal
// left open or a broken expression is found here rather than by the apiserver refusing the policy.
// (A literal escaped twice still compiles: the evaluation below catches that.)
func TestEveryPolicyExpressionCompiles(t *testing.T) {
	env := celEnv(t)
	for name, c := range stacks(t) {
		for _, o := range objectsOf(t, c) {
			// A mutation's Object{...} needs the apiserver's typed environment: the rehearsal's
			// apiserver applies it (TestAddons); its match conditions are plain CEL.
			var conditions []admissionregistrationv1.MatchCondition
			var expressions []string
			switch policy := o.(type) {
			case *admissionregistrationv1.ValidatingAdmissionPolicy:
				conditions = policy.Spec.MatchConditions
				for _, v := range policy.Spec.Variables {
					expressions = append(expressions, v.Expression)
				}
				for _, v := range policy.Spec.Validations {
					expressions = append(expressions, v.Expression)
				}
			case *admissionregistrationv1.MutatingAdmissionPolicy:
				conditions = policy.Spec.MatchConditions
			default:
				continue
			}
			for _, m := range conditions {
				expressions = append(expressions, m.Expression)
			}
			for _, e := range expressions {
				if _, issues := env.Compile(e); issues.Err() != nil {
					t.Errorf("%s: %s: %s: %v", name, o.GetName(), e, issues.Err())
				}
			}
		}
	}
}

// A node may change its labels in kubernetes.io and k8s.io (NodeRestriction's to govern) and no
// other after it registers: the policy's own expressions, evaluated by CEL on label changes.
func TestNodeLabelsPolicyUnderCEL(t *testing.T) {
	policy := find[*admissionregistrationv1.ValidatingAdmissionPolicy](nodeLabels(), NodeLabelsPolicy)
	env := celEnv(t)
	eval := func(expression string, vars map[string]any) any { t.Helper(); return celEval(t, env, expression, vars) }
	admits := func(old, now map[string]any) bool {
		inputs := map[string]any{"object": map[string]any{"metadata": map[string]any{"labels": now}},
			"oldObject": map[string]any{"metadata": map[string]any{"labels": old}}}
		variables := map[string]any{}
		for _, v := range policy.Spec.Variables {
			variables[v.Name] = eval(v.Expression, inputs)
		}
		inputs["variables"] = variables
		for _, v := range policy.Spec.Validations {
			if eval(v.Expression, inputs) != true {
				return false
			}
		}
		return true
	}
	registered := map[string]any{"kubernetes.io/hostname": "n0", "node.kubernetes.io/instance-type": "Standard_A", "example.com/pool": "cpu"}
	with := func(k, v string) map[string]any {
		out := maps.Clone(registered)
		out[k] = v
		return out
	}
	without := func(k string) map[string]any {
		out := maps.Clone(registered)
		delete(out, k)
		return out
	}
	for _, tc := range []struct {
		what  string
		now   map[string]any
		admit bool
	}{
		{"nothing changes", registered, true},
		{"its instance type (node.kubernetes.io)", with("node.kubernetes.io/instance-type", "Standard_Drill"), true},
		{"dropping a node.kubernetes.io label", without("node.kubernetes.io/instance-type"), true},
		{"dropping its pool", without("example.com/pool"), false},
		{"setting its zone", with("topology.kubernetes.io/zone", "eastus2-1"), false},
		{"setting its region (the beta key)", with("failure-domain.beta.kubernetes.io/region", "eastus2"), false},
		{"a k8s.io label", with("topology.k8s.io/zone", "1"), true},
		{"a new label of its own domain", with("example.com/accelerator", "a100"), false},
		{"its pool", with("example.com/pool", "gpu"), false},
		{"a label that only ends like kubernetes.io", with("notkubernetes.io/x", "x"), false},
	} {
		if got := admits(registered, tc.now); got != tc.admit {
			t.Errorf("%s: admitted %v, want %v", tc.what, got, tc.admit)
		}
	}
	// Once the approver has set the zone, the node keeps it as it is.
	zoned := with("topology.kubernetes.io/zone", "eastus2-1")
	moved := maps.Clone(zoned)
	moved["topology.kubernetes.io/zone"] = "eastus2-2"
	if !admits(zoned, zoned) || admits(zoned, moved) || admits(zoned, registered) {
		t.Errorf("a zoned node: keeping its zone admitted %v, moving it %v, dropping it %v; want only the first",
			admits(zoned, zoned), admits(zoned, moved), admits(zoned, registered))
	}
}

// A node lists no name but its own among its addresses; its IPs are NodeRestriction's and the CSR
// approver's to judge.
func TestNodeAddressesPolicyUnderCEL(t *testing.T) {
	policy := find[*admissionregistrationv1.ValidatingAdmissionPolicy](nodeAddresses(), NodeAddressesPolicy)
	env := celEnv(t)
	address := func(kind, value string) map[string]any { return map[string]any{"type": kind, "address": value} }
	for _, tc := range []struct {
		what      string
		addresses []any
		admit     bool
	}{
		{"its IP and its name", []any{address("InternalIP", "10.1.2.3"), address("Hostname", "n1")}, true},
		{"no addresses yet", nil, true},
		{"a Service's name as its host name", []any{address("Hostname", "n1"), address("Hostname", "clusterforge-ops.kube-system.svc")}, false},
		{"another node's name", []any{address("InternalDNS", "n2")}, false},
		{"an external name", []any{address("ExternalDNS", "example.com")}, false},
	} {
		status := map[string]any{}
		if tc.addresses != nil {
			status["addresses"] = tc.addresses
		}
		node := map[string]any{"metadata": map[string]any{"name": "n1"}, "status": status}
		if got := celEval(t, env, policy.Spec.Validations[0].Expression, map[string]any{"object": node}) == true; got != tc.admit {
			t.Errorf("%s: admitted %v, want %v", tc.what, got, tc.admit)
		}
	}
}

// A team's gang runs at a class its pods may: the scheduler orders and preempts it at its
// PodGroup's priority, and a Workload's templates make PodGroups.
func TestTeamGangPolicyUnderCEL(t *testing.T) {
	c := &spec.Cluster{Name: "cf-test", Pools: []spec.Pool{{Name: "gpu", VMSize: "Standard_ND96asr_v4", Nodes: 8}}}
	c.Default()
	policy := find[*admissionregistrationv1.ValidatingAdmissionPolicy](teamGangs(c), TeamGangPolicy)
	env := celEnv(t)
	admits := func(expressions []string, inputs map[string]any) bool {
		t.Helper()
		for _, e := range expressions {
			if celEval(t, env, e, inputs) != true {
				return false
			}
		}
		return true
	}
	var validations []string
	for _, v := range policy.Spec.Validations {
		validations = append(validations, v.Expression)
	}
	request := func(op, resource string) map[string]any {
		return map[string]any{"operation": op, "resource": map[string]any{"group": "scheduling.k8s.io", "resource": resource},
			"userInfo": map[string]any{"username": "alice"}}
	}
	protected := map[string]any{"finalizers": []any{podGroupProtectionFinalizer}}
	for _, tc := range []struct {
		what          string
		op, resource  string
		spec, oldMeta map[string]any
		meta          map[string]any
		admit         bool
	}{
		{"a PodGroup at the default class", "CREATE", "podgroups", map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": 8}}}, nil, nil, true},
		{"a PodGroup at the borrow class", "CREATE", "podgroups", map[string]any{"priorityClassName": wellknown.BorrowPriority}, nil, nil, true},
		{"a PodGroup at system-cluster-critical", "CREATE", "podgroups", map[string]any{"priorityClassName": "system-cluster-critical"}, nil, nil, false},
		{"a Workload whose template is the platform's", "CREATE", "workloads", map[string]any{"podGroupTemplates": []any{
			map[string]any{"name": "a"}, map[string]any{"name": "b", "priorityClassName": SystemPriority}}}, nil, nil, false},
		{"a Workload whose template sets a number", "CREATE", "workloads", map[string]any{"podGroupTemplates": []any{map[string]any{"name": "a", "priority": 1000000000}}}, nil, nil, false},
		{"a Workload of allowed templates", "CREATE", "workloads", map[string]any{"podGroupTemplates": []any{map[string]any{"name": "a", "priorityClassName": DefaultPriority}}}, nil, nil, true},
		{"a Workload with a composite group", "CREATE", "workloads", map[string]any{"compositePodGroupTemplates": []any{map[string]any{"name": "c"}}}, nil, nil, false},
		{"a composite PodGroup", "CREATE", "compositepodgroups", map[string]any{}, nil, nil, false},
		{"the protection finalizer kept", "UPDATE", "podgroups", map[string]any{}, protected, protected, true},
		{"the protection finalizer taken off", "UPDATE", "podgroups", map[string]any{}, protected, map[string]any{"finalizers": []any{}}, false},
		{"a PodGroup that never had it", "UPDATE", "podgroups", map[string]any{}, map[string]any{}, map[string]any{}, true},
	} {
		inputs := map[string]any{"request": request(tc.op, tc.resource), "object": map[string]any{"spec": tc.spec, "metadata": tc.meta},
			"oldObject": map[string]any{"metadata": tc.oldMeta}}
		if got := admits(validations, inputs); got != tc.admit {
			t.Errorf("%s: admitted %v, want %v", tc.what, got, tc.admit)
		}
	}
	// The controller is the one caller the policy does not judge: it takes the finalizer off.
	if cond := policy.Spec.MatchConditions; len(cond) != 1 || !admits([]string{cond[0].Expression}, map[string]any{"request": request("UPDATE", "podgroups")}) ||
		admits([]string{cond[0].Expression}, map[string]any{"request": map[string]any{"userInfo": map[string]any{"username": podGroupProtectionController}}}) {
		t.Errorf("the policy's match conditions %v do not leave out the protection controller alone", cond)
	}
}

// celEval compiles and evaluates expression as the apiserver would, failing the test on an error.
func celEval(t *testing.T, env *cel.Env, expression string, vars map[string]any) any {
	t.Helper()
	ast, issues := env.Compile(expression)
	if issues.Err() != nil {
		t.Fatalf("%s: %v", expression, issues.Err())
	}
	program, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := program.Eval(vars)
	if err != nil {
		t.Fatalf("%s: %v", expression, err)
	}
	return out.Value()
}

// A join request is the size of a genuine one: one certificate request, a few annotations (the
// attested document the largest), no labels.
func TestJoinRequestsPolicyUnderCEL(t *testing.T) {
	policy := find[*admissionregistrationv1.ValidatingAdmissionPolicy](joinRequests(), JoinRequestsPolicy)
	env := celEnv(t)
	genuine := map[string]any{wellknown.AttestedDocumentAnnotation: strings.Repeat("d", 6000), wellknown.ProviderIDAnnotation: "azure:///subscriptions/x"}
	for _, tc := range []struct {
		what        string
		request     int
		annotations map[string]any
		labels      map[string]any
		admit       bool
		meta        map[string]any
	}{
		{"a genuine request", 600, genuine, nil, true, nil},
		{"a large certificate request", maxJoinRequestBytes + 1, genuine, nil, false, nil},
		{"a large annotation", 600, map[string]any{wellknown.AttestedDocumentAnnotation: strings.Repeat("d", maxJoinAnnotationBytes+1)}, nil, false, nil},
		{"many annotations", 600, map[string]any{"a": "", "b": "", "c": "", "d": "", "e": ""}, nil, false, nil},
		{"labels", 600, genuine, map[string]any{"a": "b"}, false, nil},
		{"a finalizer", 600, genuine, nil, false, map[string]any{"finalizers": []any{"example.com/keep"}}},
		{"an owner", 600, genuine, nil, false, map[string]any{"ownerReferences": []any{map[string]any{"name": "x"}}}},
	} {
		meta := map[string]any{"annotations": tc.annotations}
		maps.Copy(meta, tc.meta)
		if tc.labels != nil {
			meta["labels"] = tc.labels
		}
		object := map[string]any{"metadata": meta, "spec": map[string]any{"request": []byte(strings.Repeat("r", tc.request))}}
		if got := celEval(t, env, policy.Spec.Validations[0].Expression, map[string]any{"object": object}) == true; got != tc.admit {
			t.Errorf("%s: admitted %v, want %v", tc.what, got, tc.admit)
		}
	}
}

// The size webhook is called for a team's own writes, by its users and service accounts, and for
// nothing the cluster writes itself: the condition evaluated by CEL.
func TestTeamObjectsWebhookJudgesTeamWritesOnly(t *testing.T) {
	hook := find[*admissionregistrationv1.ValidatingWebhookConfiguration](opsWebhooks(), OpsTeamObjectsWebhook)
	if hook == nil || len(hook.Webhooks) != 1 || len(hook.Webhooks[0].MatchConditions) != 1 {
		t.Fatalf("%s: want one webhook with one match condition, got %v", OpsTeamObjectsWebhook, hook)
	}
	env := celEnv(t)
	for _, tc := range []struct {
		user, resource string
		judged         bool
		groups         []any
	}{
		{"alice@example.com", "configmaps", true, nil},
		{"system:serviceaccount:team-a:trainer", "jobs", true, nil},
		{"system:serviceaccount:kube-system:replicaset-controller", "pods", false, nil},
		{"system:kube-controller-manager", "leases", false, nil},
		{"system:node:cf-dev-cpu000000", "pods", false, nil},
		{"alice@example.com", "events", true, nil},
		{"clusterforge-admin", "rolebindings", false, []any{pki.MastersGroup, "system:authenticated"}},
	} {
		request := map[string]any{"resource": map[string]any{"resource": tc.resource},
			"userInfo": map[string]any{"username": tc.user, "groups": append([]any{"system:authenticated"}, tc.groups...)}}
		if got := celEval(t, env, hook.Webhooks[0].MatchConditions[0].Expression, map[string]any{"request": request}) == true; got != tc.judged {
			t.Errorf("%s writing %s: judged %v, want %v", tc.user, tc.resource, got, tc.judged)
		}
	}
}

// A node registers with every taint of its pool, whatever else it adds, and only as an instance
// of a worker scale set: judged by the policy's own expressions under CEL, on the dev stack's
// pools (cf-dev-cpu is the system pool; cf-dev-cpu2 shares its name's start and has no taint).
func TestNodeRegistrationPolicyUnderCEL(t *testing.T) {
	c := stacks(t)["dev"]
	policy := find[*admissionregistrationv1.ValidatingAdmissionPolicy](nodeRegistration(c), NodeRegistrationPolicy)
	env := celEnv(t)
	taint := func(key, value, effect string) any {
		return map[string]any{"key": key, "value": value, "effect": effect}
	}
	system := taint("clusterforge.io/system", "true", "NoSchedule")
	gpu, preflight := taint("nvidia.com/gpu", "present", "NoSchedule"), taint("clusterforge.io/preflight", "pending", "NoSchedule")
	for _, tc := range []struct {
		what, name string
		taints     []any
		admit      bool
	}{
		{"a system node with its taint", "cf-dev-cpu000001", []any{system}, true},
		{"a system node without its taint", "cf-dev-cpu000001", nil, false},
		{"a system node with its taint at another effect", "cf-dev-cpu000001", []any{taint("clusterforge.io/system", "true", "PreferNoSchedule")}, false},
		{"a team node, untainted", "cf-dev-cpu2000001", nil, true},
		{"a team node adding a taint", "cf-dev-cpu2000001", []any{taint("example.com/mine", "", "NoSchedule")}, true},
		{"a GPU node with its taints", "cf-dev-gpu00000a", []any{gpu, preflight}, true},
		{"a GPU node skipping its preflight", "cf-dev-gpu00000a", []any{gpu}, false},
		{"a GPU node without its GPU taint", "cf-dev-gpu00000a", []any{preflight}, false},
		{"a name of no scale set", "drill-node", nil, false},
		{"a scale set's prefix with a longer suffix", "cf-dev-cpu20000001", nil, false},
		{"a team node with a team's taint", "cf-dev-cpu2000001", []any{taint("clusterforge.io/team", "b", "NoSchedule")}, false},
		{"a node marked for removal already", "cf-dev-cpu2000001", []any{taint("ToBeDeletedByClusterAutoscaler", "1", "NoSchedule")}, false},
		{"a node deleting its Node", "cf-dev-cpu2000001", nil, false},
		{"a team node registering with a zone", "cf-dev-cpu2000001", nil, false},
	} {
		node := map[string]any{"metadata": map[string]any{"name": tc.name}, "spec": map[string]any{}}
		if strings.Contains(tc.what, "zone") {
			node["metadata"] = map[string]any{"name": tc.name, "labels": map[string]any{"topology.kubernetes.io/zone": "eastus2-1"}}
		}
		if tc.taints != nil {
			node["spec"] = map[string]any{"taints": tc.taints}
		}
		inputs := map[string]any{"object": node, "request": map[string]any{"operation": "CREATE"}}
		if strings.Contains(tc.what, "deleting") {
			inputs = map[string]any{"object": nil, "oldObject": node, "request": map[string]any{"operation": "DELETE"}}
		}
		variables := map[string]any{}
		inputs["variables"] = variables
		for _, v := range policy.Spec.Variables {
			if inputs["object"] != nil { // the apiserver evaluates a variable only when an expression reads it
				variables[v.Name] = celEval(t, env, v.Expression, inputs)
			}
		}
		admitted := true
		for _, v := range policy.Spec.Validations {
			admitted = admitted && celEval(t, env, v.Expression, inputs) == true
		}
		if admitted != tc.admit {
			t.Errorf("%s (%s): admitted %v, want %v", tc.what, tc.name, admitted, tc.admit)
		}
	}
}

// autoscalerCordons says whether cluster-autoscaler cordons a node it removes, with the flags the
// dev stack gives it: its --cordon-node-before-terminating is true unless set (1.36's
// config/flags/flags.go). The real autoscaler's scale-down failed on the policy when it did.
func autoscalerCordons(t *testing.T) bool {
	for _, f := range AutoscalerFlags(stacks(t)["dev"]) {
		if v, ok := strings.CutPrefix(f, "--cordon-node-before-terminating="); ok {
			return v != "false"
		}
	}
	return true
}

// Each node controller changes only what it owns on a Node: the policy's own expressions under
// CEL, on the changes each makes (the keys written here as the controllers' code writes them) and
// on the ones a stolen token would try.
func TestNodeControllersPolicyUnderCEL(t *testing.T) {
	policy := find[*admissionregistrationv1.ValidatingAdmissionPolicy](nodeControllers(), NodeControllersPolicy)
	env := celEnv(t)
	autoscaler, ops, retest := "system:serviceaccount:kube-system:cluster-autoscaler", "system:serviceaccount:kube-system:clusterforge-ops",
		"system:serviceaccount:kube-system:clusterforge-ops-retest"
	taint := func(key, effect string) map[string]any {
		return map[string]any{"key": key, "value": "x", "effect": effect}
	}
	old := func() map[string]any { // a team's node
		return map[string]any{
			"metadata": map[string]any{"name": "n1", "labels": map[string]any{"node-restriction.kubernetes.io/clusterforge-pool": "cpu2"},
				"annotations": map[string]any{"node.alpha.kubernetes.io/ttl": "0"}},
			"spec": map[string]any{"providerID": "azure:///x", "taints": []any{taint("clusterforge.io/team", "NoSchedule")}},
		}
	}
	edit := func(f func(n map[string]any)) map[string]any { n := old(); f(n); return n }
	meta := func(n map[string]any) map[string]any { return n["metadata"].(map[string]any) }
	spec := func(n map[string]any) map[string]any { return n["spec"].(map[string]any) }
	addTaint := func(key, effect string) map[string]any {
		return edit(func(n map[string]any) { spec(n)["taints"] = append(spec(n)["taints"].([]any), taint(key, effect)) })
	}
	for _, tc := range []struct {
		what, user string
		now        map[string]any
		admit      bool
	}{
		{"the autoscaler marks a node to delete, as its flags have it", autoscaler, edit(func(n map[string]any) {
			spec(n)["taints"] = append(spec(n)["taints"].([]any), taint("ToBeDeletedByClusterAutoscaler", "NoSchedule"))
			if autoscalerCordons(t) {
				spec(n)["unschedulable"] = true
			}
		}), true},
		{"the autoscaler marks a deletion candidate", autoscaler, addTaint("DeletionCandidateOfClusterAutoscaler", "PreferNoSchedule"), true},
		{"the autoscaler takes a team's taint off", autoscaler, edit(func(n map[string]any) { spec(n)["taints"] = []any{} }), false},
		{"the autoscaler moves a node to another pool", autoscaler, edit(func(n map[string]any) {
			meta(n)["labels"] = map[string]any{"node-restriction.kubernetes.io/clusterforge-pool": "system"}
		}), false},
		{"the autoscaler cordons", autoscaler, edit(func(n map[string]any) { spec(n)["unschedulable"] = true }), false},
		{"clusterforge-ops gives a node to another team", ops, edit(func(n map[string]any) { spec(n)["taints"] = []any{taint("clusterforge.io/team", "NoSchedule")} }), true},
		{"clusterforge-ops marks a node for replacement", ops, edit(func(n map[string]any) {
			spec(n)["unschedulable"] = true
			spec(n)["taints"] = append(spec(n)["taints"].([]any), map[string]any{"key": "clusterforge.io/replace", "effect": "NoSchedule"})
			meta(n)["annotations"].(map[string]any)["clusterforge.io/replace-reason"] = "drill"
		}), true},
		{"clusterforge-ops sets the preflight taint", ops, addTaint("clusterforge.io/preflight", "NoSchedule"), false},
		{"clusterforge-ops removes another annotation", ops, edit(func(n map[string]any) { meta(n)["annotations"] = map[string]any{} }), false},
		{"clusterforge-ops changes the provider ID", ops, edit(func(n map[string]any) { spec(n)["providerID"] = "azure:///y" }), false},
		{"clusterforge-ops holds a node with a finalizer", ops, edit(func(n map[string]any) { meta(n)["finalizers"] = []any{"example.com/hold"} }), false},
		{"the re-test sets the preflight taint", retest, edit(func(n map[string]any) {
			spec(n)["taints"] = append(spec(n)["taints"].([]any), map[string]any{"key": "clusterforge.io/preflight", "value": "pending", "effect": "NoSchedule"})
		}), true},
		{"the re-test sets the preflight taint to another value", retest, addTaint("clusterforge.io/preflight", "NoSchedule"), false},
		{"the re-test gives a node to a team", retest, edit(func(n map[string]any) { spec(n)["taints"] = []any{} }), false},
		{"the autoscaler evicts every pod with its candidate taint", autoscaler, addTaint("DeletionCandidateOfClusterAutoscaler", "NoExecute"), false},
		{"clusterforge-ops evicts a team's pods with its taint", ops, edit(func(n map[string]any) { spec(n)["taints"] = []any{taint("clusterforge.io/team", "NoExecute")} }), false},
		{"clusterforge-ops gives a system node to a team", ops, edit(func(n map[string]any) {
			spec(n)["taints"] = []any{taint("clusterforge.io/system", "NoSchedule"), taint("clusterforge.io/team", "NoSchedule")}
		}), false},
		{"the autoscaler deletes a node it marked", autoscaler, nil, true},
		{"clusterforge-ops deletes a node it did not mark", ops, nil, false},
		{"the re-test deletes a node", retest, nil, false},
	} {
		old, operation := old(), "UPDATE"
		if tc.now == nil {
			operation = "DELETE"
			if tc.user == autoscaler {
				spec(old)["taints"] = append(spec(old)["taints"].([]any), taint("ToBeDeletedByClusterAutoscaler", "NoSchedule"))
			}
		}
		inputs := map[string]any{"object": tc.now, "oldObject": old, "request": map[string]any{"operation": operation, "userInfo": map[string]any{"username": tc.user}}}
		if celEval(t, env, policy.Spec.MatchConditions[0].Expression, inputs) != true {
			t.Fatalf("%s: the policy does not match %s", tc.what, tc.user)
		}
		variables := map[string]any{}
		inputs["variables"] = variables
		for _, v := range policy.Spec.Variables {
			if operation == "UPDATE" { // the apiserver evaluates a variable only when an expression reads it
				variables[v.Name] = celEval(t, env, v.Expression, inputs)
			}
		}
		admitted := true
		for _, v := range policy.Spec.Validations {
			admitted = admitted && celEval(t, env, v.Expression, inputs) == true
		}
		if admitted != tc.admit {
			t.Errorf("%s: admitted %v, want %v", tc.what, admitted, tc.admit)
		}
	}
}

// A node reports at most its VM size's GPUs: the policy's own expressions under CEL, on the dev
// stack's pools (cf-dev-gpu is Standard_NC4as_T4_v3, one T4; cf-dev-cpu2 has none).
func TestNodeCapacityPolicyUnderCEL(t *testing.T) {
	c := stacks(t)["dev"]
	policy := find[*admissionregistrationv1.ValidatingAdmissionPolicy](nodeCapacity(c), NodeCapacityPolicy)
	env := celEnv(t)
	// It judges kubelets, by their user; not another member of system:nodes (the rehearsal's
	// simulated nodes, one user for all).
	for user, want := range map[string]bool{"system:node:cf-dev-gpu00000a": true, "clusterforge:kwok": false} {
		request := map[string]any{"userInfo": map[string]any{"username": user, "groups": []any{"system:nodes", "system:authenticated"}}}
		for _, m := range policy.Spec.MatchConditions {
			if got := celEval(t, env, m.Expression, map[string]any{"request": request}); got != want {
				t.Errorf("match condition %s for %s: %v, want %v", m.Name, user, got, want)
			}
		}
	}
	for _, tc := range []struct {
		what, name            string
		capacity, allocatable string // "" when not reported
		admit                 bool
	}{
		{"a GPU node reporting its GPU", "cf-dev-gpu00000a", "1", "1", true},
		{"a GPU node before its device plugin runs", "cf-dev-gpu00000a", "", "", true},
		{"a GPU node claiming two", "cf-dev-gpu00000a", "2", "1", false},
		{"a GPU node offering two", "cf-dev-gpu00000a", "1", "2", false},
		{"a CPU node claiming a GPU", "cf-dev-cpu2000001", "1", "", false},
		{"a CPU node with none", "cf-dev-cpu2000001", "", "", true},
		{"a CPU node reporting zero", "cf-dev-cpu2000001", "0", "0", true},
		{"a count written as a quantity", "cf-dev-gpu00000a", "1k", "", false},
		{"a negative count", "cf-dev-gpu00000a", "-1", "", false},
		{"a name of no scale set claiming a GPU", "drill-node", "1", "", false},
		{"a name of no scale set with none", "drill-node", "", "", true},
	} {
		status := map[string]any{}
		for field, count := range map[string]string{"capacity": tc.capacity, "allocatable": tc.allocatable} {
			if count != "" {
				status[field] = map[string]any{"nvidia.com/gpu": count, "cpu": "4"}
			}
		}
		inputs := map[string]any{"object": map[string]any{"metadata": map[string]any{"name": tc.name}, "status": status}}
		variables := map[string]any{}
		inputs["variables"] = variables
		for _, v := range policy.Spec.Variables {
			variables[v.Name] = celEval(t, env, v.Expression, inputs)
		}
		admitted := true
		for _, v := range policy.Spec.Validations {
			admitted = admitted && celEval(t, env, v.Expression, inputs) == true
		}
		if admitted != tc.admit {
			t.Errorf("%s (%s, capacity %q, allocatable %q): admitted %v, want %v", tc.what, tc.name, tc.capacity, tc.allocatable, admitted, tc.admit)
		}
	}
}

// Only clusterforge-ops lifts the gang-room gate, and lifting it (with its label) is all it may do
// to a pod: the policy's expressions under CEL, on the patch the controller makes
// (components/ops/gangs) and on what a team or a stolen ops token would try.
func TestGangRoomPolicyUnderCEL(t *testing.T) {
	policy := find[*admissionregistrationv1.ValidatingAdmissionPolicy](gangRoom(), GangRoomPolicy)
	env := celEnv(t)
	ops, team := ServiceAccountUser(SystemNamespace, wellknown.OpsName), "system:serviceaccount:team-a:trainer"
	gate := map[string]any{"name": wellknown.GangRoomGate}
	old := func() map[string]any { // a gang's pod as the mutating policy left it
		return map[string]any{
			"metadata": map[string]any{"name": "train-0", "labels": map[string]any{"app": "train", wellknown.GangRoomLabel: wellknown.GangRoomWaiting}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "team/train:1"}},
				"schedulingGates": []any{map[string]any{"name": "team.example/own"}, gate}},
		}
	}
	edit := func(f func(meta, spec map[string]any)) map[string]any {
		p := old()
		f(p["metadata"].(map[string]any), p["spec"].(map[string]any))
		return p
	}
	lifted := func(meta, spec map[string]any) {
		delete(meta["labels"].(map[string]any), wellknown.GangRoomLabel)
		spec["schedulingGates"] = []any{map[string]any{"name": "team.example/own"}}
	}
	admits := func(operation string, now, oldObject any, user string) bool {
		t.Helper()
		groups := []any{"system:authenticated"}
		if user == "operator" {
			groups = append(groups, wellknown.BreakGlassGroup)
		}
		inputs := map[string]any{"object": now, "oldObject": oldObject,
			"request": map[string]any{"operation": operation, "userInfo": map[string]any{"username": user, "groups": groups}}}
		variables := map[string]any{}
		for _, v := range policy.Spec.Variables {
			variables[v.Name] = celEval(t, env, v.Expression, inputs)
		}
		inputs["variables"] = variables
		for _, v := range policy.Spec.Validations {
			if celEval(t, env, v.Expression, inputs) != true {
				return false
			}
		}
		return true
	}
	for _, tc := range []struct {
		what, user string
		now        map[string]any
		admit      bool
	}{
		{"clusterforge-ops lifts the gate and its label", ops, edit(lifted), true},
		{"clusterforge-ops lifts the gate and leaves the label", ops, edit(func(_, spec map[string]any) {
			spec["schedulingGates"] = []any{map[string]any{"name": "team.example/own"}}
		}), false},
		{"clusterforge-ops takes the label and leaves the gate", ops, edit(func(meta, _ map[string]any) {
			delete(meta["labels"].(map[string]any), wellknown.GangRoomLabel)
		}), false},
		{"break-glass lifts the gate and its label", "operator", edit(lifted), true},
		{"a team takes the label off its gated pod", team, edit(func(meta, _ map[string]any) {
			delete(meta["labels"].(map[string]any), wellknown.GangRoomLabel)
		}), false},
		{"a team changes the label's value", team, edit(func(meta, _ map[string]any) {
			meta["labels"].(map[string]any)[wellknown.GangRoomLabel] = "other"
		}), false},
		{"a team lifts the gate", team, edit(lifted), false},
		{"a team lifts its own gate", team, edit(func(_, spec map[string]any) { spec["schedulingGates"] = []any{gate} }), true},
		{"a team changes its image while gated", team, edit(func(_, spec map[string]any) {
			spec["containers"] = []any{map[string]any{"name": "c", "image": "team/train:2"}}
		}), true},
		{"clusterforge-ops lifts a team's gate", ops, edit(func(_, spec map[string]any) { spec["schedulingGates"] = []any{gate} }), false},
		{"clusterforge-ops changes an image", ops, edit(func(meta, spec map[string]any) {
			lifted(meta, spec)
			spec["containers"] = []any{map[string]any{"name": "c", "image": "evil/miner:1"}}
		}), false},
		{"clusterforge-ops adds a toleration", ops, edit(func(meta, spec map[string]any) {
			lifted(meta, spec)
			spec["tolerations"] = []any{map[string]any{"operator": "Exists"}}
		}), false},
		{"clusterforge-ops steers the pod with a node selector", ops, edit(func(meta, spec map[string]any) {
			lifted(meta, spec)
			spec["nodeSelector"] = map[string]any{"kubernetes.io/hostname": "n1"}
		}), false},
		{"clusterforge-ops relabels the pod", ops, edit(func(meta, spec map[string]any) {
			lifted(meta, spec)
			meta["labels"].(map[string]any)["app"] = "other"
		}), false},
		{"clusterforge-ops takes another label off", ops, edit(func(meta, spec map[string]any) {
			lifted(meta, spec)
			delete(meta["labels"].(map[string]any), "app")
		}), false},
	} {
		if admits("UPDATE", tc.now, old(), tc.user) != tc.admit {
			t.Errorf("%s: admitted %v, want %v", tc.what, !tc.admit, tc.admit)
		}
	}
	if !admits("CREATE", old(), nil, team) {
		t.Error("a gang's pod made gated and labelled is refused")
	}
	if admits("CREATE", edit(func(_, spec map[string]any) { delete(spec, "schedulingGates") }), nil, team) {
		t.Error("a team made an ungated pod with the gate's label")
	}
}
