// Package apiload reads the apiservers' audit log for the reads that load a large cluster the
// most (L07, L08): a per-node agent that lists or watches a namespaced resource across every
// namespace multiplies one cluster-wide watch by the node count (the seeds' culprit listed
// Events from every node), and a client of Endpoints reads what EndpointSlices replace.
package apiload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
)

// Event is what the check reads of an audit event (audit.k8s.io/v1, one JSON object a line).
type Event struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		APIGroup  string `json:"apiGroup"`
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
}

// ReadEvents parses an audit log.
func ReadEvents(r io.Reader) ([]Event, error) {
	var events []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit event %.80q: %w", sc.Text(), err)
		}
		events = append(events, e)
	}
	return events, sc.Err()
}

// Agent is a client that runs on every node: a kubelet, the kube-proxy beside it (both act as
// the node, told apart by user agent), or a DaemonSet's service account.
type Agent struct {
	Name string
	// Username is the agent's, or UsernamePrefix begins it (system:node: for every node).
	Username, UsernamePrefix string
	// UserAgentPrefix, when set, tells this agent from others of the same user.
	UserAgentPrefix string
	// ClusterWide are the namespaced resources it may list and watch across namespaces, each
	// with the field selector that must confine it ("" for none).
	ClusterWide []Allowance
}

// Allowance is one cluster-wide read an agent needs.
type Allowance struct {
	Resource, FieldSelectorPrefix string
}

func (a Agent) is(e Event) bool {
	u := e.User.Username
	return (u == a.Username || a.UsernamePrefix != "" && strings.HasPrefix(u, a.UsernamePrefix)) &&
		strings.HasPrefix(e.UserAgent, a.UserAgentPrefix)
}

// NodeAgents are the agents every worker runs outside any DaemonSet: the kubelet reads its own
// node's pods and every Service (the service links it puts in containers' environments), and,
// from Kubernetes 1.37 where the feature is GA, its own node's PodCertificateRequests (those of
// pods that project a pod certificate: few, but the watch cache has no node index for them, so
// each one is matched against every kubelet's watch); kube-proxy programs every Service and its
// EndpointSlices on every node, the data plane's inherent cost; azure-npm every pod and
// NetworkPolicy, the same cost for the policies' selectors, which name pods of any node.
func NodeAgents(nodeUserPrefix string) []Agent {
	return []Agent{
		{Name: "kube-proxy", UsernamePrefix: nodeUserPrefix, UserAgentPrefix: "kube-proxy/",
			ClusterWide: []Allowance{{Resource: "services"}, {Resource: "endpointslices"}}},
		{Name: "azure-npm", UsernamePrefix: nodeUserPrefix, UserAgentPrefix: "azure-npm/",
			ClusterWide: []Allowance{{Resource: "pods"}, {Resource: "networkpolicies"}}},
		{Name: "kubelet", UsernamePrefix: nodeUserPrefix, ClusterWide: []Allowance{OwnNodePods, {Resource: "services"},
			{Resource: "podcertificaterequests", FieldSelectorPrefix: "spec.nodeName="}}},
	}
}

// OwnNodePods is every agent's one cluster-wide read: the pods of its own node, which the
// apiserver's watch cache serves from its index on spec.nodeName.
var OwnNodePods = Allowance{Resource: "pods", FieldSelectorPrefix: "spec.nodeName="}

// DaemonSetAgent is the agent a DaemonSet runs on every node, by its pods' service account.
func DaemonSetAgent(name, namespace, serviceAccount string) Agent {
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	return Agent{Name: namespace + "/" + name, Username: "system:serviceaccount:" + namespace + ":" + serviceAccount, ClusterWide: []Allowance{OwnNodePods}}
}

// Reads says whether agent a lists or watches anything in events: an agent whose reads are never
// seen is judged on nothing (its user agent may have changed).
func (a Agent) Reads(events []Event) bool {
	return slices.ContainsFunc(events, func(e Event) bool { return (e.Verb == "list" || e.Verb == "watch") && a.is(e) })
}

// Finding is one client's read that loads the cluster for nothing.
type Finding struct {
	Client, Username, UserAgent, Verb, Resource, RequestURI, Why string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s (%s, %s): %s %s: %s", f.Client, f.Username, f.UserAgent, f.Verb, f.RequestURI, f.Why)
}

// controlPlaneUserAgents begin the user agents of the control plane's own clients: the
// controllers that keep Endpoints are exempt from the Endpoints rule.
var controlPlaneUserAgents = []string{"kube-controller-manager/", "kube-apiserver/"}

// Check returns every list and watch in events that an agent makes across namespaces of a
// namespaced resource (namespaced says which are) beyond its allowances, and every client outside
// the control plane that lists or watches Endpoints. Each finding is reported once per client,
// verb, resource and rule.
func Check(events []Event, agents []Agent, namespaced func(group, resource string) bool) []Finding {
	var out []Finding
	seen := map[string]bool{}
	add := func(f Finding) {
		key := f.Client + "|" + f.Username + "|" + f.Verb + "|" + f.Resource + "|" + f.Why
		if !seen[key] {
			seen[key] = true
			out = append(out, f)
		}
	}
	for _, e := range events {
		r := e.ObjectRef
		if (e.Verb != "list" && e.Verb != "watch") || r == nil {
			continue
		}
		client := e.User.Username
		i := slices.IndexFunc(agents, func(a Agent) bool { return a.is(e) })
		if i >= 0 {
			client = agents[i].Name
		}
		if r.APIGroup == "" && r.Resource == "endpoints" && !slices.ContainsFunc(controlPlaneUserAgents, func(p string) bool { return strings.HasPrefix(e.UserAgent, p) }) {
			add(Finding{Client: client, Username: e.User.Username, UserAgent: e.UserAgent, Verb: e.Verb, Resource: r.Resource, RequestURI: e.RequestURI,
				Why: "reads Endpoints, which EndpointSlices replace (L08)"})
		}
		if i < 0 || r.Namespace != "" || !namespaced(r.APIGroup, r.Resource) {
			continue
		}
		fieldSelector := ""
		if u, err := url.ParseRequestURI(e.RequestURI); err == nil {
			fieldSelector = u.Query().Get("fieldSelector")
		}
		if slices.ContainsFunc(agents[i].ClusterWide, func(a Allowance) bool {
			return a.Resource == r.Resource && strings.HasPrefix(fieldSelector, a.FieldSelectorPrefix)
		}) {
			continue
		}
		add(Finding{Client: client, Username: e.User.Username, UserAgent: e.UserAgent, Verb: e.Verb, Resource: r.Resource, RequestURI: e.RequestURI,
			Why: "a per-node agent reads a namespaced resource across every namespace: once per node (L07)"})
	}
	return out
}
