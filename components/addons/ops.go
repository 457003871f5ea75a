package addons

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Names of the fleet operations layer's objects only the add-ons use (shared ones: package wellknown).
const (
	// OpsAgentName is the node agent's DaemonSet; OpsRetestName the preflight re-test CronJob.
	OpsAgentName  = "clusterforge-ops-agent"
	OpsRetestName = "clusterforge-ops-retest"
	// OpsTLSSecret holds the webhooks' serving pair; the services program fills it (and every
	// webhook's caBundle) from pki.OpsWebhook.
	OpsTLSSecret = "clusterforge-ops-tls"
	// OpsBrakeWebhook and OpsTeamsWebhook name the webhook configurations.
	OpsBrakeWebhook = "clusterforge-scale-down-brake"
	OpsTeamsWebhook = "clusterforge-team-tolerations"
	// OpsTeamObjectsWebhook caps the size of what a team writes into its namespace; the
	// apiservers name its webhook, OpsTeamObjectsHook, in each refusal.
	OpsTeamObjectsWebhook = "clusterforge-team-objects"
	OpsTeamObjectsHook    = "team-objects.clusterforge.io"
	opsAddon              = "operations"
)

func opsImage() BuiltImage {
	return BuiltImage{"clusterforge.local/clusterforge-ops:" + spec.ClusterforgeVersion, "bin/clusterforge-ops", "/clusterforge-ops"}
}

// teamQuotaFlag is the stack's team quota as the controller's --team-quota takes it: name=quantity
// pairs, sorted, comma-separated (the stack's grammar allows neither character inside).
func teamQuotaFlag(c *spec.Cluster) string {
	var pairs []string
	for _, name := range slices.Sorted(maps.Keys(c.Teams.Quota)) {
		pairs = append(pairs, name+"="+c.Teams.Quota[name])
	}
	return strings.Join(pairs, ",")
}

// OpsAgentResources are the node agent's requests and limits; NodeReserve leaves room for them.
var OpsAgentResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
}

// ops is the operations layer: the controller (webhooks on both replicas, remediation and team
// taints on the leader), the node agent, the preflight re-test and the webhook configurations.
func ops(c *spec.Cluster) []Object {
	return slices.Concat(opsController(c), opsAgent(c), opsRetest(c), opsWebhooks(), breakGlass())
}

func opsController(c *spec.Cluster) []Object {
	objs := serviceAccount(SystemNamespace, wellknown.OpsName, []rbacv1.PolicyRule{
		// One shared cache of nodes and namespaces; marking, cordoning, tainting and handing back nodes.
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		// Every team namespace's quota and isolation, by server-side apply.
		{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"get", "create", "patch"}},
		{APIGroups: []string{networkingv1.GroupName}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "create", "patch"}},
		// Drains: one node's pods at a time, by field selector, through the eviction API.
		// The gang-room gate: gated pods watched by their label, the gate lifted by a patch that
		// GangRoomPolicy holds to the gate and the label; PodGroups watched; why a gang waits, as
		// an Event on its PodGroup.
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{wellknown.SchedulingGroup}, Resources: []string{"podgroups"}, Verbs: []string{"list", "watch"}},
	}, append(leaderElection(wellknown.OpsName),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch", "create"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{wellknown.OpsBrakeLedger}, Verbs: []string{"get", "update"}},
	))
	d := systemDeployment(c, SystemNamespace, wellknown.OpsName, ClusterCriticalPriority, corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:  wellknown.OpsName,
			Image: opsImage().Ref,
			Args: []string{"controller", "--namespace=" + SystemNamespace, "--listen=:" + strconv.Itoa(wellknown.OpsWebhookPort), "--tls-dir=/etc/clusterforge-ops/tls",
				"--cloud-config=" + autoscalerCloudConfigDir + "/" + autoscalerCloudConfigKey, "--worker-scale-sets=" + strings.Join(c.ScaleSetNames(), ","),
				"--apiserver-scale-set=" + c.APIServerName(),
				"--team-quota=" + teamQuotaFlag(c), "--team-object-bytes=" + strconv.FormatInt(c.Teams.MaxObjectBytes, 10),
				"--team-data-object-bytes=" + strconv.FormatInt(c.Teams.MaxDataObjectBytes, 10),
				"--remediation-max-unhealthy=" + strconv.FormatFloat(c.RemediationMaxUnhealthy(), 'g', -1, 64), "--gang-domains=" + gangDomainsFlag(c)},
			Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: wellknown.OpsWebhookPort}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
			},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(wellknown.OpsWebhookPort), Scheme: corev1.URISchemeHTTPS}}},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "tls", MountPath: "/etc/clusterforge-ops/tls", ReadOnly: true},
				{Name: "cloud-config", MountPath: autoscalerCloudConfigDir, ReadOnly: true},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: OpsTLSSecret}}},
			{Name: "cloud-config", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: AutoscalerCloudConfigSecret}}},
		},
	})
	withAzureIdentity(&d.Spec.Template.Spec, wellknown.OpsName)
	d.Spec.Replicas = ptr(int32(wellknown.OpsReplicas)) // the webhooks are served by all; one leads
	d.Spec.Strategy = replaceFirst(intstr.FromInt32(1)) // the other replica serves the webhooks meanwhile
	d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: d.Spec.Selector.MatchLabels}, TopologyKey: corev1.LabelHostname}}}}
	return append(objs, d, &corev1.Service{
		ObjectMeta: meta(SystemNamespace, wellknown.OpsName, nil),
		Spec: corev1.ServiceSpec{Selector: d.Spec.Selector.MatchLabels,
			Ports: []corev1.ServicePort{{Name: "https", Port: wellknown.OpsServicePort, TargetPort: intstr.FromInt32(wellknown.OpsWebhookPort)}}},
	})
}

// gangDomainsFlag is the cluster's gang domains at full size, as JSON, when it has gangs: what the
// gang-room gate judges gangs against. Empty turns the gate's controller off.
func gangDomainsFlag(c *spec.Cluster) string {
	if !machine.GangScheduling(c) {
		return ""
	}
	out, err := json.Marshal(machine.GangDomainShapes(c))
	if err != nil {
		panic(err) // strings, numbers and maps of them
	}
	return string(out)
}

// opsAgent runs on every worker: it reads and writes its own Node only (preflight's taint and
// condition, MaintenanceScheduled), never lists or watches (L07). It reads the metadata service
// and counts the pods' bytes in the host's nftables (L32), so it runs in the host's network with
// NET_ADMIN; the pods' names come from the CNI result cache, mounted read-only.
func opsAgent(*spec.Cluster) []Object {
	objs := nodeAgent(SystemNamespace, OpsAgentName, corev1.PodSpec{
		HostNetwork: true,
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{
			Name:  OpsAgentName,
			Image: opsImage().Ref,
			// Preflight runs the CPU stand-in only: the image carries no DCGM, so a GPU test is a
			// --preflight-command in an image that has it.
			Args: []string{"agent", "--node=$(NODE_NAME)", "--imds=http://" + wellknown.IMDSAddress,
				"--traffic-listen=:" + strconv.Itoa(wellknown.TrafficMetricsPort), "--cni-results=" + wellknown.CNIResultsDir},
			Env:             []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
			Ports:           []corev1.ContainerPort{{Name: "traffic", ContainerPort: wellknown.TrafficMetricsPort}},
			SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}},
			Resources:       OpsAgentResources,
			VolumeMounts:    []corev1.VolumeMount{{Name: "cni-results", MountPath: wellknown.CNIResultsDir, ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{{Name: "cni-results", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: wellknown.CNIResultsDir, Type: ptr(corev1.HostPathDirectoryOrCreate)}}}},
	})
	objs[0].(*corev1.ServiceAccount).AutomountServiceAccountToken = ptr(true)
	PodTemplate(objs[1]).Spec.AutomountServiceAccountToken = ptr(true)
	access := serviceAccount(SystemNamespace, OpsAgentName, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	}, nil)
	return append(objs, access[1:]...) // its own account is nodeAgent's
}

// opsRetest puts idle GPU nodes back under preflight every six hours, 5% of them at a time (L36).
func opsRetest(c *spec.Cluster) []Object {
	hasGPU := false
	for _, p := range c.Pools {
		hasGPU = hasGPU || p.IsGPU()
	}
	if !hasGPU {
		return nil
	}
	objs := serviceAccount(SystemNamespace, OpsRetestName, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	}, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "delete", "deletecollection"}},
	})
	pool := c.SystemPool()
	pod := corev1.PodSpec{
		ServiceAccountName: OpsRetestName, PriorityClassName: SystemPriority, RestartPolicy: corev1.RestartPolicyOnFailure,
		NodeSelector: map[string]string{wellknown.PoolLabel: pool.Name}, Tolerations: poolTolerations(pool),
		Containers: []corev1.Container{{
			Name: OpsRetestName, Image: opsImage().Ref,
			Args: []string{"retest", "--nodes=" + wellknown.GPULabel + "=true", "--agents=app=" + OpsAgentName,
				"--namespace=" + SystemNamespace, "--max-fraction=0.05"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
		}},
	}
	return append(objs, &batchv1.CronJob{
		ObjectMeta: meta(SystemNamespace, OpsRetestName, nil),
		Spec: batchv1.CronJobSpec{Schedule: "17 */6 * * *", ConcurrencyPolicy: batchv1.ForbidConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{BackoffLimit: ptr(int32(2)),
				Template: corev1.PodTemplateSpec{Spec: pod}}}},
	})
}

// BrakeMatchConditions are the brake's match conditions: a node DELETE, or an update that adds a
// removal taint (the nodes' other updates never reach the webhook), by anyone but an operator
// breaking glass (wellknown.BreakGlassGroup).
var BrakeMatchConditions = func() []admissionregistrationv1.MatchCondition {
	keys := quoteList(wellknown.AutoscalerDeletionTaint, wellknown.ReplaceTaint)
	return []admissionregistrationv1.MatchCondition{
		{Name: "removals-only", Expression: `request.operation == 'DELETE' || ` +
			`(has(object.spec.taints) && object.spec.taints.exists(t, t.key in ` + keys + `) && ` +
			`!(has(oldObject.spec.taints) && oldObject.spec.taints.exists(t, t.key in ` + keys + `)))`},
		{Name: "not-breaking-glass", Expression: "!(" + quote(wellknown.BreakGlassGroup) + " in request.userInfo.groups)"},
	}
}()

// breakGlass lets an operator who impersonates wellknown.BreakGlassGroup remove nodes: the
// brake fails closed, and a cluster whose clusterforge-ops is down (its nodes gone) could
// otherwise remove none.
func breakGlass() []Object {
	const role = "clusterforge:break-glass"
	return []Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "update", "patch", "delete"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: wellknown.BreakGlassGroup}}},
	}
}

// opsWebhooks register the controller's webhooks. The brake and the team objects' sizes fail
// closed: a removal it cannot judge is refused, and so is a team's write (its running pods go
// on). The team tolerations fail open: without them a team's pods still run on shared nodes. The
// services program fills each caBundle.
func opsWebhooks() []Object {
	service := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: SystemNamespace, Name: wellknown.OpsName, Path: ptr(path), Port: ptr(int32(wellknown.OpsServicePort))}}
	}
	fail, ignore := admissionregistrationv1.Fail, admissionregistrationv1.Ignore
	// The brake records each removal it admits, and nothing on a dry run.
	none, noneOnDryRun := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.SideEffectClassNoneOnDryRun
	rule := func(resource string, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{Operations: ops,
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}}}}
	}
	return []Object{
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: OpsBrakeWebhook},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: "scale-down-brake.clusterforge.io", ClientConfig: service(wellknown.OpsBrakePath),
				Rules:           rule("nodes", admissionregistrationv1.Update, admissionregistrationv1.Delete),
				MatchConditions: BrakeMatchConditions,
				FailurePolicy:   &fail, SideEffects: &noneOnDryRun, TimeoutSeconds: ptr(int32(5)), AdmissionReviewVersions: []string{"v1"},
			}},
		},
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: OpsTeamsWebhook},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "team-tolerations.clusterforge.io", ClientConfig: service(wellknown.OpsTeamsPath),
				Rules: rule("pods", admissionregistrationv1.Create),
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: wellknown.TeamKey, Operator: metav1.LabelSelectorOpExists}}},
				FailurePolicy: &ignore, SideEffects: &none, TimeoutSeconds: ptr(int32(3)), AdmissionReviewVersions: []string{"v1"},
			}},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: OpsTeamObjectsWebhook},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: OpsTeamObjectsHook, ClientConfig: service(wellknown.OpsTeamObjectsPath),
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"},
						Resources: []string{"*", "pods/ephemeralcontainers"}, Scope: ptr(admissionregistrationv1.NamespacedScope)}}},
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: wellknown.TeamKey, Operator: metav1.LabelSelectorOpExists}}},
				MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "team-writes", Expression: teamWrites}},
				FailurePolicy:   &fail, SideEffects: &none, TimeoutSeconds: ptr(int32(3)), AdmissionReviewVersions: []string{"v1"},
			}},
		},
	}
}

// teamWrites are the writes the size webhook judges: those of a team's users and service
// accounts, Events among them. The cluster's controllers (kube-system's service accounts, the
// control plane's users, the nodes) write what a team's objects already bound, pods from a
// template say; the cluster's administrators (system:masters) keep writing while no replica of
// clusterforge-ops answers.
var teamWrites = `!('` + pki.MastersGroup + `' in request.userInfo.groups) && ` +
	`(!request.userInfo.username.startsWith('system:') || ` +
	`(request.userInfo.username.startsWith('` + serviceAccountUserPrefix + `') && ` +
	`!request.userInfo.username.startsWith('` + ServiceAccountUser(SystemNamespace, "") + `')))`

// OpsTLS is the webhooks' serving pair Secret (pki.OpsWebhook) and the authority the webhooks
// verify the apiservers' client certificate with (pki.WebhookClientCA).
func OpsTLS(certPEM, keyPEM, clientCAPEM string) (*corev1.Secret, error) {
	s := &corev1.Secret{
		ObjectMeta: meta(SystemNamespace, OpsTLSSecret, nil),
		Type:       corev1.SecretTypeTLS,
		StringData: map[string]string{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, corev1.ServiceAccountRootCAKey: clientCAPEM},
	}
	return s, finish(s, opsAddon)
}

// TrustOpsCA makes the clients of clusterforge-ops trust caPEM, the authority of its serving
// certificate (pki.WebhookServingCA): the caBundle of every webhook configuration among objs (the
// apiservers) and Prometheus's file of it (OpsCAFile).
func TrustOpsCA(objs []Object, caPEM string) {
	for _, o := range objs {
		switch w := o.(type) {
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			for i := range w.Webhooks {
				w.Webhooks[i].ClientConfig.CABundle = []byte(caPEM)
			}
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			for i := range w.Webhooks {
				w.Webhooks[i].ClientConfig.CABundle = []byte(caPEM)
			}
		case *corev1.ConfigMap:
			if w.Namespace == MonitoringNamespace && w.Name == PrometheusName {
				w.Data[OpsCAFile] = caPEM
			}
		}
	}
}
