package tenants

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/ops/teams"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/netns"
	"github.com/clusterforge/clusterforge/test/podsecurity"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// A hostile tenant: a user with edit rights in one team's namespace, nothing else. Each way out
// is tried and refused, and the refusal is asserted to come from the component that should refuse
// it; then a pod of the team runs and, from its network namespace, tries the node's and the
// platform's servers.
func HostileTenantIsRefused(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := drills.Clientset(t, framework.Booted)
	ns := drills.TeamNamespace(t, admin, "drill-hostile-a", "a")
	drills.TeamQuotaHeld(t, admin, ns)
	tenant := tenantWithEdit(t, admin, ns, "drill-tenant")
	nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) < 2 {
		t.Fatalf("the drill needs two nodes: %v", err)
	}

	pod := func(name string, edit func(*corev1.PodSpec)) *corev1.Pod {
		p := podsecurity.Restricted(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "app", Image: framework.Booted.Cluster.Versions.PauseImage}}}})
		edit(&p.Spec)
		return p
	}
	podSecurity, placement := `violates PodSecurity "restricted`, drills.RefusedBy(addons.TeamPlacementPolicy)
	for _, tc := range []struct {
		what    string
		pod     *corev1.Pod
		refusal string
	}{
		{"hostPath /", pod("host-path", func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}), podSecurity},
		{"privileged", pod("privileged", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: framework.Ptr(true)} // escalation is implied
		}), podSecurity},
		{"hostNetwork", pod("host-network", func(s *corev1.PodSpec) { s.HostNetwork = true }), podSecurity},
		{"team b's toleration", pod("other-team", func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: wellknown.TeamKey, Operator: corev1.TolerationOpEqual, Value: "b", Effect: corev1.TaintEffectNoSchedule}}
		}), placement},
		{"every taint's toleration", pod("every-taint", func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}), placement},
		{"another node by name", pod("named", func(s *corev1.PodSpec) { s.NodeName = nodes.Items[0].Name }), placement},
		{"the system pool's toleration", pod("system-pool", func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: wellknown.SystemTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}), placement},
	} {
		_, err := tenant.CoreV1().Pods(ns).Create(ctx, tc.pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("%s: %v, want a refusal containing %q", tc.what, err, tc.refusal)
		}
	}

	// The team quota clusterforge-ops keeps: no NodePort Service (a port on every node's address).
	nodePort := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "node-port"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := tenant.CoreV1().Services(ns).Create(ctx, nodePort, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "exceeded quota: "+teams.QuotaName) {
		t.Errorf("a NodePort Service: %v, want a refusal by the team quota", err)
	}

	// clusterforge-ops's webhook caps each object a team writes: the quota's counts then bound its
	// share of etcd-main. A 900 KiB ConfigMap and a Deployment carrying a 40 KiB template are
	// refused (the apiservers alone take both), what fits is taken, and may not grow past its cap.
	sizes := framework.Booted.Cluster.Teams
	deniedBySizes := `admission webhook "` + addons.OpsTeamObjectsHook + `" denied the request`
	configMap := func(name string, bytes int64) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"blob": strings.Repeat("x", int(bytes))}}
	}
	if _, err := tenant.CoreV1().ConfigMaps(ns).Create(ctx, configMap("large", 900<<10), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), deniedBySizes) {
		t.Errorf("a 900 KiB ConfigMap: %v, want a refusal by %s", err, addons.OpsTeamObjectsHook)
	}
	if fits, err := tenant.CoreV1().ConfigMaps(ns).Create(ctx, configMap("fits", sizes.MaxDataObjectBytes/2), metav1.CreateOptions{}); err != nil {
		t.Errorf("a ConfigMap half its cap: %v", err)
	} else {
		fits.Data["blob"] += strings.Repeat("x", int(sizes.MaxDataObjectBytes))
		if _, err := tenant.CoreV1().ConfigMaps(ns).Update(ctx, fits, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), deniedBySizes) {
			t.Errorf("that ConfigMap grown past its cap: %v, want a refusal by %s", err, addons.OpsTeamObjectsHook)
		}
	}
	template := pod("template", func(*corev1.PodSpec) {})
	template.Annotations = map[string]string{"padding": strings.Repeat("x", 40<<10)}
	large := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "large-template"}, Spec: appsv1.DeploymentSpec{
		Replicas: framework.Ptr(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "large"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "large"}, Annotations: template.Annotations}, Spec: template.Spec}}}
	if _, err := tenant.AppsV1().Deployments(ns).Create(ctx, large, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), deniedBySizes) {
		t.Errorf("a Deployment with a 40 KiB template: %v, want a refusal by %s", err, addons.OpsTeamObjectsHook)
	}

	// RBAC: nothing outside the namespace, no node identity.
	if _, err := tenant.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing kube-system's Secrets: %v, want Forbidden by RBAC", err)
	}
	csr := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "drill-tenant-node"}, Spec: certv1.CertificateSigningRequestSpec{
		Request: []byte("not read: RBAC refuses first"), SignerName: certv1.KubeAPIServerClientKubeletSignerName,
		Usages: []certv1.KeyUsage{certv1.UsageClientAuth}}}
	if _, err := tenant.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a CSR for a node's name: %v, want Forbidden by RBAC", err)
	}

	// A pod of the team runs, with the team's toleration from the team webhook.
	probe, err := tenant.CoreV1().Pods(ns).Create(ctx, pod("probe", func(*corev1.PodSpec) {}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the team's own restricted pod: %v", err)
	}
	if err := drills.WaitUntil(2*time.Minute, func() error {
		if probe, err = tenant.CoreV1().Pods(ns).Get(ctx, probe.Name, metav1.GetOptions{}); err == nil && probe.Status.Phase != corev1.PodRunning {
			err = fmt.Errorf("the team's pod is %s", probe.Status.Phase)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Not beside the platform's identities: a team's pod the scheduler alone places avoids the
	// system pool, and one that asks for it by label is left unscheduled, for its taint.
	system := framework.Booted.Cluster.SystemPool().Name
	if n, err := admin.CoreV1().Nodes().Get(ctx, probe.Spec.NodeName, metav1.GetOptions{}); err != nil || n.Labels[wellknown.PoolLabel] == system {
		t.Errorf("the team's pod landed on %s (%v), of the system pool %s", probe.Spec.NodeName, err, system)
	}
	pinned, err := tenant.CoreV1().Pods(ns).Create(ctx, pod("on-the-system-pool", func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{wellknown.PoolLabel: system}
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a team's pod asking for the system pool by label: %v", err)
	}
	// The scheduler counts the nodes it left out for a taint; the system pool's carry its own.
	systemNodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: wellknown.PoolLabel + "=" + system})
	if err != nil || len(systemNodes.Items) == 0 {
		t.Fatalf("the system pool's nodes: %v", err)
	}
	for _, n := range systemNodes.Items {
		if !slices.ContainsFunc(n.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == wellknown.SystemTaint }) {
			t.Errorf("node %s of the system pool has no %s taint: %v", n.Name, wellknown.SystemTaint, n.Spec.Taints)
		}
	}
	forTaints := fmt.Sprintf("%d node(s) had untolerated taint(s)", len(systemNodes.Items))
	if err := drills.WaitUntil(time.Minute, func() error {
		p, err := tenant.CoreV1().Pods(ns).Get(ctx, pinned.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			return fmt.Errorf("the team's pod was placed on %s, of the system pool", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, forTaints) {
				return nil
			}
		}
		return fmt.Errorf("the pod asking for the system pool is not yet left out for its nodes' taints (%q): %v", forTaints, p.Status.Conditions)
	}); err != nil {
		t.Error(err)
	}
	// Its processes are capped: the kubelet wrote the stack's podPidsLimit into the pod's cgroup
	// (in the unified hierarchy on Azure's Debian 12; in the pids controller's on a cgroup v1 host,
	// such as this one, whose hierarchy the machines share).
	slice := "kubepods-*pod" + strings.ReplaceAll(string(probe.UID), "-", "_") + ".slice"
	var paths []string
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/pids"} {
		paths = append(paths, root+"/kubepods.slice/"+slice+"/pids.max", root+"/kubepods.slice/*/"+slice+"/pids.max")
	}
	pidsMax, err := framework.Booted.Exec(ctx, probe.Spec.NodeName, "sh", "-c", "cat "+strings.Join(paths, " ")+" 2>/dev/null; true")
	if got := strings.TrimSpace(pidsMax); err != nil || got != strconv.Itoa(framework.Booted.Cluster.Kubelet.PodPidsLimit) {
		t.Errorf("the team's pod's cgroup allows %q processes (%v), want %d", got, err, framework.Booted.Cluster.Kubelet.PodPidsLimit)
	}
	path, err := framework.Booted.PodNetns(ctx, probe.Spec.NodeName, ns, probe.Name)
	if err != nil {
		t.Fatal(err)
	}
	// The pod resolves names at cluster DNS, as its resolv.conf says.
	dial := netns.Resolving(netns.DialerIn(path), net.JoinHostPort(framework.Booted.Cluster.DNSServiceIP(), "53"))

	// The metadata service: the node's guard refuses the connection.
	if conn, err := dial(ctx, "tcp", net.JoinHostPort(wellknown.IMDSAddress, "80")); err == nil {
		conn.Close()
		t.Error("the team's pod reached the instance metadata service")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the metadata service: %v, want the connection refused by the node's guard", err)
	}
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the drill asks who answers, not whom to trust
	// Another node's kubelet: it authenticates its callers.
	for _, n := range nodes.Items {
		if n.Name == probe.Spec.NodeName {
			continue
		}
		url := "https://" + net.JoinHostPort(nodeIP(n), strconv.Itoa(wellknown.KubeletPort)) + "/pods"
		if status := statusOf(t, insecure, http.MethodGet, url, nil); status != http.StatusUnauthorized {
			t.Errorf("%s's kubelet answered the team's pod HTTP %d, want 401", n.Name, status)
		}
	}
	// clusterforge-ops's webhooks: a forged review gets 403 from every replica.
	deployment, err := admin.AppsV1().Deployments(addons.SystemNamespace).Get(ctx, wellknown.OpsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := admin.CoreV1().Pods(addons.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(deployment.Spec.Selector)})
	if err != nil || len(ops.Items) == 0 {
		t.Fatalf("clusterforge-ops's pods: %v", err)
	}
	forged := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"forged","kind":{"version":"v1","kind":"Node"},"name":"` +
		nodes.Items[0].Name + `","operation":"DELETE","userInfo":{"username":"system:serviceaccount:kube-system:cluster-autoscaler"}}}`)
	for _, p := range ops.Items {
		for _, path := range []string{wellknown.OpsBrakePath, wellknown.OpsTeamsPath} {
			url := "https://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(wellknown.OpsWebhookPort)) + path
			if status := statusOf(t, insecure, http.MethodPost, url, forged); status != http.StatusForbidden {
				t.Errorf("a forged review to %s%s: HTTP %d, want 403 from clusterforge-ops", p.Name, path, status)
			}
		}
	}
	// Entra ID: tokens of the team's service accounts for Entra's audience (a pod may project them),
	// the default one and one named like clusterforge-ops's, get no Azure token as clusterforge-ops's
	// identity through the SDK from the team's pod; Entra's stand-in names the reason.
	if _, err := tenant.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: wellknown.OpsName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"default", wellknown.OpsName} {
		expiry := int64(3600)
		token, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{addons.AzureTokenAudience}, ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = entra.SignIn(ctx, insecure, framework.Booted.AuthorityHost(), machines.RehearsalTenantID, machines.RehearsalClientIDs()[wellknown.OpsName], token.Status.Token)
		if err == nil || !strings.Contains(err.Error(), "AADSTS70021") {
			t.Errorf("the team's %s token at Entra ID: %v, want AADSTS70021 (no federated credential for its subject)", sa, err)
		}
	}
}

// tenantWithEdit is a client of user, who holds edit in namespace ns and nothing else: a team
// member.
func tenantWithEdit(t *testing.T, admin *kubernetes.Clientset, ns, user string) *kubernetes.Clientset {
	t.Helper()
	if _, err := admin.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := framework.Booted.RESTConfigAs(user, "")
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tenant
}

func statusOf(t *testing.T, hc *http.Client, method, url string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// nodeIP is the node's InternalIP.
func nodeIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
