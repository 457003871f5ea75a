package apiload

import (
	"strings"
	"testing"
)

func event(user, agent, verb, group, resource, namespace, uri string) string {
	return `{"verb":"` + verb + `","requestURI":"` + uri + `","userAgent":"` + agent + `","user":{"username":"` + user +
		`"},"objectRef":{"apiGroup":"` + group + `","resource":"` + resource + `","namespace":"` + namespace + `"}}`
}

func TestCheckFindsPerNodeAgentsReadingAcrossNamespacesAndEndpointsClients(t *testing.T) {
	namespaced := func(group, resource string) bool { return resource != "nodes" && resource != "namespaces" }
	// Reading every namespace's Endpoints from every node breaks both rules; every other row one.
	rules := map[string]int{"an agent's every endpoint": 2}
	agents := append(NodeAgents("system:node:"), DaemonSetAgent("bad-agent", "drill", "scraper"), DaemonSetAgent("ops-agent", "kube-system", ""))
	for _, tc := range []struct {
		name, line string
		want       string // the findings' client, "" for none
	}{
		{"the kubelet's own pods", event("system:node:w0", "kubelet/v1.34.2", "watch", "", "pods", "", "/api/v1/pods?fieldSelector=spec.nodeName%3Dw0&watch=true"), ""},
		{"the kubelet's own pod certificate requests", event("system:node:w0", "kubelet/v1.37.2", "watch", "certificates.k8s.io", "podcertificaterequests", "",
			"/apis/certificates.k8s.io/v1/podcertificaterequests?fieldSelector=spec.nodeName%3Dw0&watch=true"), ""},
		{"the kubelet's every pod certificate request", event("system:node:w0", "kubelet/v1.37.2", "watch", "certificates.k8s.io", "podcertificaterequests", "",
			"/apis/certificates.k8s.io/v1/podcertificaterequests?watch=true"), "kubelet"},
		{"the kubelet's services", event("system:node:w0", "kubelet/v1.34.2", "list", "", "services", "", "/api/v1/services?limit=500"), ""},
		{"the kubelet's every pod", event("system:node:w0", "kubelet/v1.34.2", "list", "", "pods", "", "/api/v1/pods"), "kubelet"},
		{"kube-proxy's slices", event("system:node:w0", "kube-proxy/v1.34.2", "watch", "discovery.k8s.io", "endpointslices", "", "/apis/discovery.k8s.io/v1/endpointslices?watch=true"), ""},
		{"azure-npm's pods", event("system:node:w0", "azure-npm/v0.0.0 (linux/amd64) kubernetes/$Format", "watch", "", "pods", "", "/api/v1/pods?watch=true"), ""},
		{"azure-npm's policies", event("system:node:w0", "azure-npm/v0.0.0 (linux/amd64) kubernetes/$Format", "list", "networking.k8s.io", "networkpolicies", "", "/apis/networking.k8s.io/v1/networkpolicies?limit=500"), ""},
		{"azure-npm's secrets", event("system:node:w0", "azure-npm/v0.0.0 (linux/amd64) kubernetes/$Format", "list", "", "secrets", "", "/api/v1/secrets"), "azure-npm"},
		{"kube-proxy's events", event("system:node:w0", "kube-proxy/v1.34.2", "list", "", "events", "", "/api/v1/events"), "kube-proxy"},
		{"an agent's nodes", event("system:serviceaccount:drill:scraper", "prometheus/3", "watch", "", "nodes", "", "/api/v1/nodes?watch=true"), ""},
		{"an agent's own namespace", event("system:serviceaccount:drill:scraper", "prometheus/3", "list", "", "pods", "drill", "/api/v1/namespaces/drill/pods"), ""},
		{"an agent's every event", event("system:serviceaccount:drill:scraper", "prometheus/3", "list", "", "events", "", "/api/v1/events"), "drill/bad-agent"},
		{"an agent's every endpoint", event("system:serviceaccount:drill:scraper", "prometheus/3", "watch", "", "endpoints", "", "/api/v1/endpoints?watch=true"), "drill/bad-agent"},
		{"a default service account's node pods", event("system:serviceaccount:kube-system:default", "ops/1", "list", "", "pods", "", "/api/v1/pods?fieldSelector=spec.nodeName%3Dw0"), ""},
		{"a Deployment's endpoints in a namespace", event("system:serviceaccount:monitoring:prometheus", "prometheus/3", "list", "", "endpoints", "default", "/api/v1/namespaces/default/endpoints"), "system:serviceaccount:monitoring:prometheus"},
		{"the endpoints controller", event("system:serviceaccount:kube-system:endpoint-controller", "kube-controller-manager/v1.34.2", "watch", "", "endpoints", "", "/api/v1/endpoints?watch=true"), ""},
		{"a Deployment's cluster-wide pods", event("system:serviceaccount:kube-system:coredns", "coredns/1.12", "watch", "", "pods", "", "/api/v1/pods?watch=true"), ""},
		{"a get", event("system:node:w0", "kubelet/v1.34.2", "get", "", "configmaps", "", "/api/v1/configmaps"), ""},
	} {
		events, err := ReadEvents(strings.NewReader(tc.line + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		got := Check(events, agents, namespaced)
		if rules[tc.name] == 0 {
			rules[tc.name] = 1
		}
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s: found %v", tc.name, got)
		case tc.want != "" && (len(got) != rules[tc.name] || got[0].Client != tc.want):
			t.Errorf("%s: found %v, want %d of %s", tc.name, got, rules[tc.name], tc.want)
		}
	}
}

func TestReadsTellsAnAgentsReadsByItsUserAgent(t *testing.T) {
	events, err := ReadEvents(strings.NewReader(event("system:node:w0", "azure-npm/v0.0.0 (linux/amd64) kubernetes/$Format", "watch", "", "pods", "", "/api/v1/pods?watch=true") + "\n" +
		event("system:node:w0", "kube-proxy/v1.37.2", "get", "", "nodes", "", "/api/v1/nodes/w0") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range NodeAgents("system:node:") {
		if got, want := a.Reads(events), a.Name != "kube-proxy"; got != want { // kube-proxy only gets; the kubelet has no user agent prefix
			t.Errorf("%s reads: %v, want %v", a.Name, got, want)
		}
	}
}
