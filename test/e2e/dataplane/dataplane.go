package dataplane

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/netns"
)

// Every node registered with the providerID cloud-provider-azure gives a scale-set instance,
// azure://<resource id>, read from the instance metadata at boot: the Azure SDK's parser reads
// it as an instance of a scale set the autoscaler's --nodes names for the node's pool, in the
// cluster's resource group. Each node is also the node its gang domain says, as the gang-room gate
// judges gangs against it.
func ProviderIDsAreScaleSetInstancesOfTheirPool(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := framework.Booted.Cluster
	autoscaled := map[string]bool{} // the scale-set names cluster-autoscaler's --nodes=min:max:<name> flags give
	for _, f := range addons.AutoscalerFlags(c) {
		if v, ok := strings.CutPrefix(f, "--nodes="); ok {
			autoscaled[v[strings.LastIndex(v, ":")+1:]] = true
		}
	}
	nodes, err := drills.Clientset(t, framework.Booted).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) == 0 {
		t.Fatal("no nodes")
	}
	for _, n := range nodes.Items {
		raw, ok := strings.CutPrefix(n.Spec.ProviderID, "azure://")
		if !ok {
			t.Errorf("node %s: providerID %q does not start with azure://", n.Name, n.Spec.ProviderID)
			continue
		}
		id, err := arm.ParseResourceID(raw)
		if err != nil {
			t.Errorf("node %s: providerID %q: %v", n.Name, n.Spec.ProviderID, err)
			continue
		}
		if got := id.ResourceType.String(); !strings.EqualFold(got, "Microsoft.Compute/virtualMachineScaleSets/virtualMachines") {
			t.Errorf("node %s: providerID names a %s, not a scale-set instance", n.Name, got)
		}
		if id.Parent == nil || !autoscaled[id.Parent.Name] {
			t.Errorf("node %s: providerID's scale set is not one the autoscaler's --nodes name (%v)", n.Name, autoscaled)
			continue
		}
		if !strings.EqualFold(id.ResourceGroupName, c.ResourceGroup()) {
			t.Errorf("node %s: providerID's resource group %q, the cluster's is %q", n.Name, id.ResourceGroupName, c.ResourceGroup())
		}
		if set, ok := c.ScaleSetOf(id.Parent.Name); !ok || set.Pool.Name != n.Labels[wellknown.PoolLabel] {
			t.Errorf("node %s of pool %q is an instance of scale set %s, another pool's", n.Name, n.Labels[wellknown.PoolLabel], id.Parent.Name)
		}
	}

	// Resource Manager lists every scale set the autoscaler's --nodes name to its identity, as it
	// lists them at start-up, an empty pool's too, each with its pool's node-template tags.
	factory, err := framework.Booted.ComputeAs(machines.RehearsalClientIDs()[addons.AutoscalerName])
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]*armcompute.VirtualMachineScaleSet{}
	pager := factory.NewVirtualMachineScaleSetsClient().NewListPager(c.ResourceGroup(), nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("the autoscaler listing the resource group's scale sets: %v", err)
		}
		for _, ss := range page.Value {
			listed[*ss.Name] = ss
		}
	}
	for name := range autoscaled {
		set, known := c.ScaleSetOf(name)
		tags := tagsOf(listed[name])
		if !known || tags == nil {
			t.Errorf("scale set %s, which the autoscaler's --nodes name, is not listed to it (%d listed)", name, len(listed))
			continue
		}
		for k, v := range machine.NodeTemplateTags(set) {
			if tags[k] != v {
				t.Errorf("scale set %s's tag %s is %q, want %q", name, k, tags[k], v)
			}
		}
	}

	// The node the autoscaler builds from a scale set's tags, as it decodes them, is the node each
	// of its instances' kubelets registered: its labels, its taints once ready, its GPUs.
	shapes := machine.GangDomainShapes(c)
	for _, n := range nodes.Items {
		raw, _ := strings.CutPrefix(n.Spec.ProviderID, "azure://")
		id, err := arm.ParseResourceID(raw)
		if err != nil || id.Parent == nil || listed[id.Parent.Name] == nil {
			continue
		}
		for _, m := range templateMismatches(c, &n, listed[id.Parent.Name]) {
			t.Error(m)
		}
		for _, m := range gangDomainMismatches(shapes, &n) {
			t.Error(m)
		}
	}
}

// gangDomainMismatches compares a registered node with its gang domain's node as the gang-room
// gate judges gangs against it (machine.GangDomainShapes): every label, its zone, the taints it
// keeps once ready, its pods and GPUs (a label the template lacks, the gate takes to hold). Its
// CPU and memory are this host's (deviation "CPUs and memory").
func gangDomainMismatches(shapes []spec.GangDomainShape, n *corev1.Node) []string {
	domain := n.Labels[wellknown.GangDomainLabel]
	for _, s := range shapes {
		i := slices.IndexFunc(s.Domains, func(d spec.GangDomainSize) bool { return d.Name == domain })
		if i < 0 {
			continue
		}
		var out []string
		want := maps.Clone(s.Labels)
		want[wellknown.GangDomainLabel] = domain
		for k, v := range want {
			if n.Labels[k] != v {
				out = append(out, fmt.Sprintf("node %s: gang domain %s's label %s=%s, the node's %q", n.Name, domain, k, v, n.Labels[k]))
			}
		}
		if z, zones := n.Labels[wellknown.ZoneLabel], s.Domains[i].Zones; len(zones) > 0 && !slices.Contains(zones, z) || len(zones) == 0 && z != "" {
			out = append(out, fmt.Sprintf("node %s is in zone %q; gang domain %s in %v", n.Name, z, domain, s.Domains[i].Zones))
		}
		var registered, judged []string
		for _, tt := range n.Spec.Taints {
			if !strings.HasPrefix(tt.Key, "node.kubernetes.io/") && tt.Key != machine.PreflightTaint.Key {
				registered = append(registered, tt.ToString())
			}
		}
		for _, tt := range s.Taints {
			judged = append(judged, (&corev1.Taint{Key: tt.Key, Value: tt.Value, Effect: corev1.TaintEffect(tt.Effect)}).ToString())
		}
		slices.Sort(registered)
		slices.Sort(judged)
		if !slices.Equal(registered, judged) {
			out = append(out, fmt.Sprintf("node %s's taints %v; gang domain %s's %v", n.Name, registered, domain, judged))
		}
		for _, r := range []corev1.ResourceName{corev1.ResourcePods, machine.GPUResource} {
			got := n.Status.Allocatable[r]
			if want := resource.MustParse(cmp.Or(s.Allocatable[string(r)], "0")); got.Cmp(want) != 0 {
				out = append(out, fmt.Sprintf("node %s offers %s %s; gang domain %s's node %s", n.Name, got.String(), r, domain, want.String()))
			}
		}
		return out
	}
	return []string{fmt.Sprintf("node %s is in gang domain %q, which the gate does not know", n.Name, domain)}
}

// tagsOf is a scale set's tags as plain strings; nil for no scale set.
func tagsOf(ss *armcompute.VirtualMachineScaleSet) map[string]string {
	if ss == nil {
		return nil
	}
	tags := map[string]string{}
	for k, v := range ss.Tags {
		tags[k] = *v
	}
	return tags
}

// templateMismatches compares a registered node with the node cluster-autoscaler builds from its
// scale set, as it decodes the set's tags (labels, taints, startup taints aside, and GPUs) and
// places it (region and zone).
func templateMismatches(c *spec.Cluster, n *corev1.Node, ss *armcompute.VirtualMachineScaleSet) []string {
	tags := tagsOf(ss)
	startup := map[string]bool{}
	for _, f := range addons.AutoscalerFlags(c) {
		if v, ok := strings.CutPrefix(f, "--startup-taint="); ok {
			startup[v] = true
		}
	}
	var out []string
	labels, taints, resources := autoscalerTemplate(tags)
	for k, v := range n.Labels {
		if got, ok := labels[k]; !autoscalerOwnLabels[k] && (!ok || got != v) {
			out = append(out, fmt.Sprintf("node %s has label %s=%s; its scale set's template says %q (present %v)", n.Name, k, v, got, ok))
		}
	}
	for k, v := range labels {
		if n.Labels[k] != v {
			out = append(out, fmt.Sprintf("node %s: the template's label %s=%s, the node's %q", n.Name, k, v, n.Labels[k]))
		}
	}
	var registered, template []string
	for _, tt := range n.Spec.Taints {
		if !strings.HasPrefix(tt.Key, "node.kubernetes.io/") {
			registered = append(registered, tt.ToString())
		}
	}
	for _, tt := range taints {
		if !startup[tt.Key] {
			template = append(template, tt.ToString())
		}
	}
	slices.Sort(registered)
	slices.Sort(template)
	if !slices.Equal(registered, template) {
		out = append(out, fmt.Sprintf("node %s's taints %v; its scale set's template's, startup taints aside, %v", n.Name, registered, template))
	}
	gpus := n.Status.Capacity[corev1.ResourceName(machine.GPUResource)]
	if want := resources[machine.GPUResource]; gpus.Cmp(want) != 0 {
		out = append(out, fmt.Sprintf("node %s has %s GPUs; its scale set's template %s", n.Name, gpus.String(), want.String()))
	}
	// The template's region is the scale set's location, lowercased, and its zone one of the set's
	// zones as "<region>-<zone>" (buildGenericLabels), or "0" for a set without zones.
	region := strings.ToLower(*ss.Location)
	zones := []string{"0"}
	if len(ss.Zones) > 0 {
		zones = nil
		for _, z := range ss.Zones {
			zones = append(zones, region+"-"+*z)
		}
	}
	if got := n.Labels["topology.kubernetes.io/region"]; got != region {
		out = append(out, fmt.Sprintf("node %s is in region %q; its scale set's template in %q", n.Name, got, region))
	}
	if got := n.Labels["topology.kubernetes.io/zone"]; !slices.Contains(zones, got) {
		out = append(out, fmt.Sprintf("node %s is in zone %q; its scale set's template in one of %v", n.Name, got, zones))
	}
	return out
}

// autoscalerOwnLabels are the labels cluster-autoscaler gives every template node itself
// (cloudprovider/azure's buildGenericLabels), whatever the tags say.
var autoscalerOwnLabels = map[string]bool{
	"kubernetes.io/arch": true, "kubernetes.io/os": true, "kubernetes.io/hostname": true, "beta.kubernetes.io/arch": true, "beta.kubernetes.io/os": true,
	"node.kubernetes.io/instance-type": true, "beta.kubernetes.io/instance-type": true, "topology.kubernetes.io/region": true, "topology.kubernetes.io/zone": true,
	"failure-domain.beta.kubernetes.io/region": true, "failure-domain.beta.kubernetes.io/zone": true, "topology.disk.csi.azure.com/zone": true,
}

// autoscalerTemplate decodes a scale set's node-template tags as cluster-autoscaler 1.36's Azure
// provider does (azure_template.go), written here from its rules rather than from ours: a label's
// or taint's key turns '_' into '/', then "~2" into '_'; a taint's value is "<value>:<effect>"
// for the three effects; a resource's name turns both '_' and "~2" into '/'.
func autoscalerTemplate(tags map[string]string) (map[string]string, []corev1.Taint, map[string]resource.Quantity) {
	const prefix = "k8s.io_cluster-autoscaler_node-template_"
	labels, resources := map[string]string{}, map[string]resource.Quantity{}
	var taints []corev1.Taint
	key := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "_", "/"), "~2", "_") }
	effect := regexp.MustCompile("(.*):(?:NoSchedule|NoExecute|PreferNoSchedule)")
	for tag, value := range tags {
		if parts := strings.Split(tag, prefix+"label_"); len(parts) > 1 && parts[1] != "" {
			labels[key(parts[1])] = value
		}
		if parts := strings.Split(tag, prefix+"taint_"); len(parts) > 1 && effect.MatchString(value) {
			v, e, _ := strings.Cut(value, ":")
			taints = append(taints, corev1.Taint{Key: key(parts[1]), Value: v, Effect: corev1.TaintEffect(e)})
		}
		if parts := strings.Split(tag, prefix+"resources_"); len(parts) > 1 && parts[1] != "" {
			if q, err := resource.ParseQuantity(value); err == nil {
				resources[strings.ReplaceAll(strings.ReplaceAll(parts[1], "_", "/"), "~2", "/")] = q
			}
		}
	}
	return labels, taints, resources
}

// Client is a pause pod on one worker whose network namespace the checks dial from: every packet
// they send leaves through the pod's veth, as the pod's own would.
type Client struct {
	node, name, ip, netns string
	dial                  func(ctx context.Context, network, addr string) (net.Conn, error)
}

var (
	clientsOnce sync.Once
	clients     []Client
	clientsNS   string
	clientsErr  error
)

// headlessService selects the clients; its DNS name answers with their pod IPs.
const headlessService = "clients"

// SharedClients starts one client pod per worker (once for every check, of every subsystem), behind a headless Service.
func SharedClients(t testing.TB) ([]Client, string) {
	t.Helper()
	if framework.Booted == nil {
		t.Skip("no boot under -short")
	}
	clientsOnce.Do(func() {
		// Shared by every check, so it outlives the test that made it; the boot goes after them all.
		clientsNS = "boot-dataplane"
		clients, clientsErr = StartClients(drills.Clientset(t, framework.Booted), clientsNS)
	})
	if clientsErr != nil {
		t.Fatal(clientsErr)
	}
	return clients, clientsNS
}

// StartClients starts, in a new namespace ns, one client pod per worker behind a headless Service.
func StartClients(cs *kubernetes.Clientset, ns string) ([]Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	labels := map[string]string{"app": headlessService}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: headlessService},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var out []Client
	for _, m := range framework.Booted.Machines {
		if m.Image != machine.ImageWorker {
			continue
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "client-" + m.Name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: m.Name, TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "pause", Image: framework.Booted.Cluster.Versions.PauseImage}}},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		out = append(out, Client{node: m.Name, name: pod.Name})
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("the data-plane checks need two workers, the stack boots %d", len(out))
	}
	for i := range out {
		c := &out[i]
		if err := drills.WaitUntil(2*time.Minute, func() error {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{})
			if err == nil && (p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "") {
				err = fmt.Errorf("pod %s is %s", c.name, p.Status.Phase)
			}
			if err == nil {
				c.ip = p.Status.PodIP
			}
			return err
		}); err != nil {
			return nil, err
		}
		path, err := framework.Booted.PodNetns(ctx, c.node, ns, c.name)
		if err != nil {
			return nil, err
		}
		c.netns, c.dial = path, netns.DialerIn(path)
	}
	return out, nil
}

// HTTPFrom is an HTTP client whose connections leave from the client pod; tlsConfig may be nil.
func HTTPFrom(c Client, tlsConfig *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: c.dial, TLSClientConfig: tlsConfig}}
}

// ResolverFrom asks the cluster DNS Service from the client pod, as the pod's resolv.conf says.
func ResolverFrom(c Client) *net.Resolver {
	server := net.JoinHostPort(framework.Booted.Cluster.DNSServiceIP(), "53")
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return c.dial(ctx, network, server)
	}}
}

// AddOnPods are the running pods of an add-on, by node.
func AddOnPods(t *testing.T, namespace, selector string) map[string]corev1.Pod {
	t.Helper()
	pods, err := drills.Clientset(t, framework.Booted).CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A pod reaches a CoreDNS pod on the other worker by its pod IP (Azure CNI's routes, the VNet
// stand-in between the nodes), and the CoreDNS Service's ClusterIP (kube-proxy's nftables rules).
func PodReachesPodsAndServices(t *testing.T) {
	cl, _ := SharedClients(t)
	CheckPodsReachPodsAndServices(t, cl)
}

// CheckPodsReachPodsAndServices has every client reach every CoreDNS pod by its pod IP, at
// least one of them from another node, and the CoreDNS Service's ClusterIP.
func CheckPodsReachPodsAndServices(t *testing.T, cl []Client) {
	t.Helper()
	dns := AddOnPods(t, addons.SystemNamespace, addons.DNSAppLabel+"="+addons.DNSService)
	across := false
	for _, c := range cl {
		hc := HTTPFrom(c, nil)
		for node, target := range dns {
			across = across || node != c.node
			if code, body := get(t, hc, "http://"+net.JoinHostPort(target.Status.PodIP, "8080")+"/health"); code != http.StatusOK {
				t.Errorf("%s (%s) → CoreDNS %s on %s: %d %s\nthe pod's conditions: %+v\n%s", c.name, c.ip, target.Status.PodIP, node, code, body,
					target.Status.Conditions, framework.Booted.RouteReport(c.ip, target.Status.PodIP))
			}
		}
		if code, body := get(t, hc, "http://"+net.JoinHostPort(framework.Booted.Cluster.DNSServiceIP(), "9153")+"/metrics"); code != http.StatusOK || !strings.Contains(body, "coredns_build_info") {
			t.Errorf("%s → the %s Service's ClusterIP: %d", c.name, addons.DNSService, code)
		}
	}
	if !across {
		t.Errorf("no client and CoreDNS pod on different nodes (CoreDNS on %d nodes): the VNet between nodes went unchecked", len(dns))
	}
}

// Pods resolve through CoreDNS: the kubernetes Service's name gives its ClusterIP, and a headless
// Service's name gives every ready pod behind it.
func PodDNSThroughCoreDNS(t *testing.T) {
	cl, ns := SharedClients(t)
	CheckPodDNS(t, cl, ns)
}

// CheckPodDNS resolves, from every client, the kubernetes Service and the clients' headless one in ns.
func CheckPodDNS(t *testing.T, cl []Client, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var want []string
	for _, c := range cl {
		want = append(want, c.ip)
	}
	slices.Sort(want)
	for _, c := range cl {
		r := ResolverFrom(c)
		got, err := r.LookupHost(ctx, "kubernetes.default.svc.cluster.local")
		if err != nil || !slices.Equal(got, []string{framework.Booted.Cluster.KubernetesServiceIP()}) {
			t.Errorf("%s: kubernetes.default.svc.cluster.local = %v %v, want %s", c.name, got, err, framework.Booted.Cluster.KubernetesServiceIP())
		}
		name := headlessService + "." + ns + ".svc.cluster.local"
		err = drills.WaitUntil(30*time.Second, func() error { // the EndpointSlice follows the pods' readiness
			got, err = r.LookupHost(ctx, name)
			slices.Sort(got)
			if err == nil && !slices.Equal(got, want) {
				err = fmt.Errorf("%v", got)
			}
			return err
		})
		if err != nil {
			t.Errorf("%s: %s: %v, want %v", c.name, name, err, want)
		}
	}
}

// A pod on each worker (each worker VNet) calls the API through kubernetes.default with the
// service-account token and CA the kubelet projected into it, and is told who it is.
func PodCallsTheAPIWithItsToken(t *testing.T) {
	cl, ns := SharedClients(t)
	for _, c := range cl {
		t.Run(c.node, func(t *testing.T) { checkPodCallsTheAPI(t, c, ns) })
	}
}

func checkPodCallsTheAPI(t *testing.T, c Client, ns string) {
	ctx := context.Background()
	p, err := drills.Clientset(t, framework.Booted).CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := framework.Booted.Machine(c.node)
	if err != nil {
		t.Fatal(err)
	}
	// The projected volume, as the container sees it at /var/run/secrets/kubernetes.io/serviceaccount.
	dirs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/root/var/lib/kubelet/pods/%s/volumes/kubernetes.io~projected/kube-api-access-*", m.PID, p.UID))
	if len(dirs) != 1 {
		t.Fatalf("the pod's service-account volume: %v", dirs)
	}
	token, err := os.ReadFile(filepath.Join(dirs[0], "token"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dirs[0], "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("the pod's ca.crt holds no certificate")
	}
	hc := HTTPFrom(c, &tls.Config{RootCAs: roots})
	// Names resolve through CoreDNS from the pod, as its resolv.conf would have them.
	hc.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ips, err := ResolverFrom(c).LookupHost(ctx, host)
		if err != nil {
			return nil, err
		}
		return c.dial(ctx, network, net.JoinHostPort(ips[0], port))
	}
	req, _ := http.NewRequest(http.MethodPost, "https://kubernetes.default.svc.cluster.local/apis/authentication.k8s.io/v1/selfsubjectreviews",
		strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	req.Header.Set("Authorization", "Bearer "+string(token))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var review struct {
		Status struct {
			UserInfo struct{ Username string } `json:"userInfo"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("SelfSubjectReview: %d %v", resp.StatusCode, err)
	}
	if want := "system:serviceaccount:" + ns + ":default"; review.Status.UserInfo.Username != want {
		t.Errorf("the API says the pod is %q, want %q", review.Status.UserInfo.Username, want)
	}
}

// The instance metadata service and the wireserver's agent port refuse a pod's connection at once
// (the worker image's nftables guard); the worker itself still reads its metadata.
func PodsCannotReachTheMetadataEndpoints(t *testing.T) {
	cl, _ := SharedClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range cl {
		for _, addr := range []string{wellknown.IMDSAddress + ":80", machine.WireserverAddress + ":80"} {
			conn, err := c.dial(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
				t.Errorf("%s reached %s", c.name, addr)
			} else if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s → %s: %v, want the connection refused by the guard", c.name, addr, err)
			}
		}
		out, err := framework.Booted.Exec(ctx, c.node, "curl", "-fsS", "--max-time", "5", "-H", "Metadata: true",
			"http://"+wellknown.IMDSAddress+"/metadata/instance/compute/name?api-version=2021-02-01&format=text")
		if err != nil || out != c.node {
			t.Errorf("%s itself cannot read its metadata: %q %v", c.node, out, err)
		}
	}
}

// Prometheus, running on a worker, scrapes every apiserver, every member of both etcd clusters and
// every node's exporter.
func PrometheusScrapesTheControlPlaneAndNodes(t *testing.T) {
	cl, _ := SharedClients(t)
	base := prometheusURL(t)
	url := base + "/api/v1/targets?state=active"
	ops, err := drills.Clientset(t, framework.Booted).AppsV1().Deployments(addons.SystemNamespace).Get(context.Background(), wellknown.OpsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"apiserver": framework.Booted.Cluster.APIServer.Count, "certificates": framework.Booted.Cluster.APIServer.Count, "node": len(cl),
		addons.PodTrafficJob: len(cl),
		wellknown.OpsName:    int(*ops.Spec.Replicas)} // the brake's refusals, over TLS the webhook serving CA verifies
	for _, e := range framework.Booted.Cluster.EtcdClusters() {
		want["etcd/"+e.Role] = len(e.Members)
	}
	hc := HTTPFrom(cl[0], nil)
	err = drills.WaitUntil(2*time.Minute, func() error {
		var targets struct {
			Data struct {
				ActiveTargets []struct {
					Labels    map[string]string
					Health    string
					LastError string
				}
			}
		}
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&targets); err != nil {
			return err
		}
		up := map[string]int{}
		var down []string
		for _, tg := range targets.Data.ActiveTargets {
			job := tg.Labels["job"]
			if job == "etcd" {
				job += "/" + tg.Labels["etcd_cluster"]
			}
			if tg.Health == "up" {
				up[job]++
			} else {
				down = append(down, tg.Labels["instance"]+": "+tg.Health+" "+tg.LastError)
			}
		}
		for job, n := range want {
			if up[job] != n {
				return fmt.Errorf("%d of %d %s targets up; not up: %v", up[job], n, job, down)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every apiserver machine reports its files and every etcd member's serving certificate, none
	// unreadable, the soonest far from the CertificateExpiringSoon threshold.
	query := func(q string) (float64, error) { return promQuery(hc, base, q) }
	members := 0
	for _, e := range framework.Booted.Cluster.EtcdClusters() {
		members += len(e.Members)
	}
	err = drills.WaitUntil(time.Minute, func() error {
		endpoints, err := query(`count(count by (source) (clusterforge_certificate_expiry_timestamp_seconds{source=~"tls://.*"}))`)
		if err != nil || int(endpoints) != members {
			return fmt.Errorf("%v etcd members' certificates reported, want %d (%v)", endpoints, members, err)
		}
		unreadable, err := query(`max(clusterforge_certificate_read_errors)`)
		if err != nil || unreadable != 0 {
			return fmt.Errorf("%v certificates unreadable (%v)", unreadable, err)
		}
		left, err := query(`min(clusterforge_certificate_expiry_timestamp_seconds) - time()`)
		if err != nil || left < spec.CertificateRenewBefore.Seconds() {
			return fmt.Errorf("the soonest certificate expires in %v s (%v)", left, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// prometheusURL is the base URL of the one Prometheus pod, at its pod IP.
func prometheusURL(t *testing.T) string {
	t.Helper()
	prom := AddOnPods(t, addons.MonitoringNamespace, "app="+addons.PrometheusName)
	if len(prom) != 1 {
		t.Fatalf("%d Prometheus pods run", len(prom))
	}
	for _, p := range prom {
		return "http://" + net.JoinHostPort(p.Status.PodIP, "9090")
	}
	return ""
}

// promQuery is the value of an instant query that has one result.
func promQuery(hc *http.Client, base, q string) (float64, error) {
	resp, err := hc.Get(base + "/api/v1/query?query=" + neturl.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct{ Value []any }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("%s: %d results", q, len(r.Data.Result))
	}
	return strconv.ParseFloat(r.Data.Result[0].Value[1].(string), 64)
}
