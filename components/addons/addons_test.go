package addons

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	_ "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm/runtime" // sets the public cloud's Resource Manager audience

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// stacks are every stack of stacks/, loaded and validated.
func stacks(t *testing.T) map[string]*spec.Cluster {
	t.Helper()
	files, err := filepath.Glob("../../stacks/Pulumi.*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no stacks: %v", err)
	}
	out := map[string]*spec.Cluster{}
	for _, f := range files {
		c, err := spec.LoadStack(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "Pulumi."), ".yaml")] = c
	}
	return out
}

func objectsOf(t *testing.T, c *spec.Cluster) []Object {
	t.Helper()
	objs, err := Objects(c)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find[T Object](objs []Object, name string) T {
	var zero T
	for _, o := range objs {
		if typed, ok := o.(T); ok && o.GetName() == name {
			return typed
		}
	}
	return zero
}

func TestEveryObjectIsTypedLabelledAndUnique(t *testing.T) {
	for name, c := range stacks(t) {
		seen := map[string]bool{}
		for _, o := range objectsOf(t, c) {
			key := Key(o)
			if o.GetObjectKind().GroupVersionKind().Kind == "" || seen[key] {
				t.Errorf("%s: %s has no kind or is defined twice", name, key)
			}
			seen[key] = true
			if o.GetLabels()[ManagedByLabel] != ManagedBy {
				t.Errorf("%s: %s lacks the %s label", name, key, ManagedByLabel)
			}
			u, err := Unstructured(o)
			if err != nil || u.GetAPIVersion() == "" || u.GetKind() == "" {
				t.Errorf("%s: %s does not convert: %v", name, key, err)
			}
		}
	}
}

func TestDNSSpreadsOnePerNode(t *testing.T) {
	for name, c := range stacks(t) {
		objs := objectsOf(t, c)
		d := find[*appsv1.Deployment](objs, DNSName)
		if d == nil {
			t.Fatalf("%s: no CoreDNS Deployment", name)
		}
		if int(*d.Spec.Replicas) != c.DNS.Replicas || c.DNS.Replicas < max(2, c.TargetNodes/100) {
			t.Errorf("%s: %d CoreDNS replicas for %d nodes", name, *d.Spec.Replicas, c.TargetNodes)
		}
		terms := d.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		if len(terms) != 1 || terms[0].TopologyKey != corev1.LabelHostname || terms[0].LabelSelector.MatchLabels[DNSAppLabel] != DNSService {
			t.Errorf("%s: CoreDNS lacks the required anti-affinity on %s (L13): %+v", name, corev1.LabelHostname, terms)
		}
		pdb := find[*policyv1.PodDisruptionBudget](objs, DNSName)
		if pdb == nil || pdb.Spec.Selector.MatchLabels[DNSAppLabel] != DNSService {
			t.Errorf("%s: no PodDisruptionBudget selects CoreDNS", name)
		}
		svc := find[*corev1.Service](objs, DNSService)
		if svc == nil || svc.Spec.ClusterIP != c.DNSServiceIP() {
			t.Errorf("%s: the DNS Service is not at the kubelets' clusterDNS %s", name, c.DNSServiceIP())
		}
	}
}

func TestBalloonsHoldWholeNodesAtTheLowestPriority(t *testing.T) {
	for name, c := range stacks(t) {
		objs := objectsOf(t, c)
		balloon := find[*schedulingv1.PriorityClass](objs, BalloonPriority)
		if balloon == nil || balloon.Value >= 0 || balloon.Value < ExpendablePodsCutoff || *balloon.PreemptionPolicy != corev1.PreemptNever {
			t.Fatalf("%s: balloon PriorityClass must be negative, not expendable to the autoscaler, and never preempt: %+v", name, balloon)
		}
		defaults := 0
		for _, o := range objs {
			if pc, ok := o.(*schedulingv1.PriorityClass); ok && pc.GlobalDefault {
				defaults++
				if pc.Value <= balloon.Value {
					t.Errorf("%s: the default priority %d does not preempt balloons", name, pc.Value)
				}
			}
		}
		if defaults != 1 {
			t.Errorf("%s: %d global default PriorityClasses, want 1", name, defaults)
		}
		for _, pool := range c.Pools {
			d := find[*appsv1.Deployment](objs, BalloonName(pool))
			if d == nil {
				t.Fatalf("%s: pool %s has no balloon Deployment", name, pool.Name)
			}
			pod := d.Spec.Template.Spec
			capacity, _ := spec.VMCapacity(pool.VMSize)
			req := pod.Containers[0].Resources.Requests
			if int(*d.Spec.Replicas) != pool.Nodes || pod.PriorityClassName != BalloonPriority || pod.NodeSelector[wellknown.PoolLabel] != pool.Name {
				t.Errorf("%s: balloon of %s: %d replicas, class %q, selector %v", name, pool.Name, *d.Spec.Replicas, pod.PriorityClassName, pod.NodeSelector)
			}
			// Whole node: more than half of it, so two never share one; the GPUs all of them.
			if req.Cpu().MilliValue()*2 <= int64(capacity.CPUs)*1000 || req.Memory().Value()*2 <= int64(capacity.MemoryGiB)<<30 {
				t.Errorf("%s: balloon of %s requests %v of a %d-CPU node", name, pool.Name, req, capacity.CPUs)
			}
			gpus := req[machine.GPUResource]
			if gpus.Value() != int64(capacity.GPUs) {
				t.Errorf("%s: balloon of %s requests %d of %d GPUs", name, pool.Name, gpus.Value(), capacity.GPUs)
			}
			if terms := pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution; len(terms) != 1 || terms[0].TopologyKey != corev1.LabelHostname {
				t.Errorf("%s: balloons of %s are not spread one per node", name, pool.Name)
			}
		}
	}
}

func TestDaemonSetsFitInNodeReserve(t *testing.T) {
	for name, c := range stacks(t) {
		cpu, memory := resource.Quantity{}, resource.Quantity{}
		for _, o := range objectsOf(t, c) {
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				for _, ctr := range ds.Spec.Template.Spec.Containers {
					cpu.Add(*ctr.Resources.Requests.Cpu())
					memory.Add(*ctr.Resources.Requests.Memory())
				}
			}
		}
		if cpu.Cmp(NodeReserve[corev1.ResourceCPU]) >= 0 || memory.Cmp(NodeReserve[corev1.ResourceMemory]) >= 0 {
			t.Errorf("%s: DaemonSets request %s CPU and %s memory, beyond the NodeReserve balloons leave", name, cpu.String(), memory.String())
		}
	}
}

// The static half of L07: a DaemonSet's service account may be bound only to roles that neither
// list nor watch anything (an agent reads and writes its own Node by name), and only such a
// DaemonSet mounts an API token. The rehearsal asks the apiserver's authorizer the same question.
func TestDaemonSetsNeverListOrWatch(t *testing.T) {
	for name, c := range stacks(t) {
		objs := objectsOf(t, c)
		rules := map[string][]rbacv1.PolicyRule{}
		for _, o := range objs {
			switch r := o.(type) {
			case *rbacv1.ClusterRole:
				rules["ClusterRole/"+r.Name] = r.Rules
			case *rbacv1.Role:
				rules["Role/"+r.Namespace+"/"+r.Name] = r.Rules
			}
		}
		for _, o := range objs {
			ds, ok := o.(*appsv1.DaemonSet)
			if !ok {
				continue
			}
			pod := ds.Spec.Template.Spec
			bound := false
			for _, b := range objs {
				var subjects []rbacv1.Subject
				var role string
				switch rb := b.(type) {
				case *rbacv1.ClusterRoleBinding:
					subjects, role = rb.Subjects, "ClusterRole/"+rb.RoleRef.Name
				case *rbacv1.RoleBinding:
					subjects, role = rb.Subjects, rb.RoleRef.Kind+"/"+rb.Namespace+"/"+rb.RoleRef.Name
					if rb.RoleRef.Kind == "ClusterRole" {
						role = "ClusterRole/" + rb.RoleRef.Name
					}
				}
				if !slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
					return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == ds.Namespace && s.Name == pod.ServiceAccountName
				}) {
					continue
				}
				bound = true
				for _, r := range rules[role] {
					for _, verb := range r.Verbs {
						if verb == "list" || verb == "watch" || verb == rbacv1.VerbAll {
							t.Errorf("%s: %s lets DaemonSet %s %s %v: per-node pollers (L07)", name, Key(b), ds.Name, verb, r.Resources)
						}
					}
				}
			}
			if mounts := pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken; mounts && !bound {
				t.Errorf("%s: DaemonSet %s mounts an API token it has no use for", name, ds.Name)
			}
		}
	}
}

func TestAutoscalerCoversEveryScaleSet(t *testing.T) {
	for name, c := range stacks(t) {
		flags := AutoscalerFlags(c)
		for _, set := range c.ScaleSets() {
			want := "--nodes=0:" + strconv.Itoa(set.MaxNodes) + ":" + set.AzureName
			if !slices.Contains(flags, want) {
				t.Errorf("%s: autoscaler lacks %s (min 0, max = capacity, L19)", name, want)
			}
		}
		for _, want := range []string{"--max-total-unready-percentage=" + strconv.Itoa(c.Autoscaler.MaxUnreadyPercentage),
			"--expendable-pods-priority-cutoff=" + strconv.Itoa(ExpendablePodsCutoff), "--cloud-provider=azure"} {
			if !slices.Contains(flags, want) {
				t.Errorf("%s: autoscaler lacks %s", name, want)
			}
		}
	}
}

// The cloud config names its settings as cluster-autoscaler 1.36.1's Azure provider reads them
// (the JSON tags of its Config and of cloud-provider-azure's, read from their source): the caches,
// the client's rate limits and If-Match on scale-set writes. A misspelt key is silently ignored.
func TestAutoscalerCloudConfigHoldsItsReadBudget(t *testing.T) {
	c := stacks(t)["prod-10k"]
	secret, err := AutoscalerCloudConfig(c, Azure{ClientIDs: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(secret.StringData[autoscalerCloudConfigKey]), &cfg); err != nil {
		t.Fatal(err)
	}
	// Worked by hand for prod-10k: an eighth of Compute's 360 High Cost Get VMSS a minute (1,080
	// burst) for each of the two reading clients, a quarter of Delete VMSS's 175 (525 burst);
	// 101 pages of VM lists, made every 225 s on average (a 300 s TTL, splayed by up to 150 s), fit.
	for key, want := range map[string]any{
		"vmssCacheTTLInSeconds": 60.0, "vmssVirtualMachinesCacheTTLInSeconds": 300.0, "vmssVmsCacheJitter": 150.0,
		"cloudProviderRateLimit": true, "cloudProviderRateLimitQPS": 0.75, "cloudProviderRateLimitBucket": 135.0,
		"cloudProviderRateLimitQPSWrite": 175.0 / 4 / 60, "cloudProviderRateLimitBucketWrite": 131.0, "enableVMSSEtag": true,
	} {
		if got, ok := cfg[key]; !ok || got != want {
			t.Errorf("cloud config %s = %v (present %v), want %v", key, got, ok, want)
		}
	}
}

func TestPrometheusGOMAXPROCSMatchesItsCPUs(t *testing.T) {
	for name, c := range stacks(t) {
		d := find[*appsv1.Deployment](objectsOf(t, c), PrometheusName)
		ctr := d.Spec.Template.Spec.Containers[0]
		cpus := ctr.Resources.Requests.Cpu().Value()
		if len(ctr.Env) != 1 || ctr.Env[0].Name != "GOMAXPROCS" || ctr.Env[0].Value != strconv.FormatInt(cpus, 10) || cpus > maxPrometheusCPUs {
			t.Errorf("%s: Prometheus requests %d CPUs, env %v (L34)", name, cpus, ctr.Env)
		}
		largest := BalloonRequests(c, c.SystemPool())
		if ctr.Resources.Requests.Memory().Cmp(*largest.Memory()) > 0 {
			t.Errorf("%s: Prometheus asks for more memory than a node of its pool has", name)
		}
	}
}

// Every series an alert reads survives the relabel drops.
func TestDroppedSeriesSpareAlerts(t *testing.T) {
	metric := regexp.MustCompile(`[a-z_]+[a-z0-9_]*\{`)
	for _, g := range AlertRules().Groups {
		for _, r := range g.Rules {
			for _, m := range metric.FindAllString(r.Expr, -1) {
				name := strings.TrimSuffix(m, "{")
				for job, patterns := range DroppedSeries {
					if regexp.MustCompile("^(?:" + strings.Join(patterns, "|") + ")$").MatchString(name) {
						t.Errorf("alert %s reads %s, which job %s drops", r.Alert, name, job)
					}
				}
			}
		}
	}
}

// A Deployment whose replicas must each have a node of their own can only roll out on a pool of
// exactly that many nodes by replacing before adding: a surge pod would wait for a node forever.
func TestRollingUpdatesNeedNoSpareNode(t *testing.T) {
	for name, c := range stacks(t) {
		for _, o := range objectsOf(t, c) {
			d, ok := o.(*appsv1.Deployment)
			if !ok || !ownNodeEach(d) {
				continue
			}
			pool, pinned := d.Spec.Template.Spec.NodeSelector[wellknown.PoolLabel]
			if !pinned {
				continue
			}
			replicas := int(*d.Spec.Replicas)
			if i := slices.IndexFunc(c.Pools, func(p spec.Pool) bool { return p.Name == pool }); i < 0 || c.Pools[i].Nodes > replicas {
				continue // a spare node exists when the stack is applied
			}
			ru := d.Spec.Strategy.RollingUpdate
			if ru == nil || ru.MaxSurge == nil {
				t.Errorf("%s: %s rolls out with the default surge on pool %s of %d nodes", name, d.Name, pool, replicas)
				continue
			}
			if surge, _ := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, replicas, true); surge != 0 {
				t.Errorf("%s: %s surges %d pods on pool %s of %d nodes; want 0", name, d.Name, surge, pool, replicas)
			}
		}
	}
}

// ownNodeEach is a required anti-affinity of the Deployment's pods to each other per node.
func ownNodeEach(d *appsv1.Deployment) bool {
	a := d.Spec.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	return slices.ContainsFunc(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, func(term corev1.PodAffinityTerm) bool {
		return term.TopologyKey == corev1.LabelHostname && term.LabelSelector != nil &&
			reflect.DeepEqual(term.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels)
	})
}

// The gang domains reach clusterforge-ops as one container argument, which Linux refuses past
// MAX_ARG_STRLEN (128 KiB): every stack's, at every pool's maxNodes, stays well inside, and parses
// back into every worker scale set's gang domain.
func TestGangDomainsFlagFitsOneArgument(t *testing.T) {
	const maxArgStrlen = 128 << 10
	for name, c := range stacks(t) {
		flag := gangDomainsFlag(c)
		if !machine.GangScheduling(c) {
			continue
		}
		if len(flag) > maxArgStrlen/4 {
			t.Errorf("%s: --gang-domains is %d bytes; want under a quarter of the %d one argument may hold", name, len(flag), maxArgStrlen)
		}
		var shapes []spec.GangDomainShape
		if err := json.Unmarshal([]byte(flag), &shapes); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		seen := map[string]int{}
		for _, s := range shapes {
			for _, d := range s.Domains {
				seen[d.Name] += d.MaxNodes
			}
		}
		want := map[string]int{}
		for _, s := range c.ScaleSets() {
			want[s.GangDomain()] += s.MaxNodes
		}
		if !maps.Equal(seen, want) {
			t.Errorf("%s: --gang-domains holds %v; the scale sets make %v", name, seen, want)
		}
		t.Logf("%s: --gang-domains is %d bytes for %d domains", name, len(flag), len(seen))
	}
}
