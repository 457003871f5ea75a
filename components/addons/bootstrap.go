package addons

import (
	"fmt"
	"regexp"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// The objects that let workers join and serve: a joining node's certificate request made with the
// join token and approved by clusterforge-csr-approver once Azure vouches for the instance,
// renewals by the node itself approved by the controller-manager, serving certificates by
// clusterforge-csr-approver. They are applied from outside the machines, with the other add-ons,
// so no machine holds a credential able to create them.

// NodeJoinRole is what the join token may do: ask for a node's client certificate.
const NodeJoinRole = "clusterforge:node-join"

// NetworkPolicyRole is what every node's azure-npm reads.
const NetworkPolicyRole = "clusterforge:network-policy"

// bootstrapTokenFormat is "<id>.<secret>" as the apiserver's bootstrap authenticator reads it.
var bootstrapTokenFormat = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// Foundation is what the control plane needs before it works at all, finished (labels, kinds):
// the join and serving-certificate RBAC. The services program applies them among the add-ons,
// first; the rehearsal as soon as its API answers.
func Foundation(c *spec.Cluster) ([]Object, error) {
	var objs []Object
	for _, part := range []struct {
		addon   string
		objects []Object
	}{{"bootstrap", bootstrap(c)}} {
		for _, o := range part.objects {
			if err := finish(o, part.addon); err != nil {
				return nil, err
			}
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// JoinRequestsPolicy names the admission policy that bounds what a join request may hold.
const JoinRequestsPolicy = "clusterforge-join-requests"

// Bounds of a join request (one key's request, an attested document and a provider ID), far above
// what clusterforge-node-join sends: every holder of the join token can create requests, each kept
// in etcd-main until its verdict (an approved one for an hour after) and in etcd's history until
// the next compaction.
const (
	maxJoinRequestBytes    = 4 << 10
	maxJoinAnnotationBytes = 16 << 10
	maxJoinAnnotations     = 4
)

// joinRequests holds the join token's requests to the size of a genuine one.
func joinRequests() []Object {
	annotations := "object.metadata.?annotations.orValue({})"
	return admissionPolicy(JoinRequestsPolicy,
		admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{certv1.GroupName}, APIVersions: []string{"*"}, Resources: []string{"certificatesigningrequests"}}}}}},
		[]admissionregistrationv1.MatchCondition{{Name: "join-token", Expression: quote(pki.BootstrapGroup) + " in request.userInfo.groups"}},
		nil,
		admissionregistrationv1.Validation{
			// A finalizer would keep a request past the controller-manager's clean-up, for ever.
			Expression: fmt.Sprintf("size(object.spec.request) <= %d && size(%s) <= %d && %s.all(k, size(%s[k]) <= %d) && "+
				"size(object.metadata.?labels.orValue({})) == 0 && size(object.metadata.?finalizers.orValue([])) == 0 && "+
				"size(object.metadata.?ownerReferences.orValue([])) == 0",
				maxJoinRequestBytes, annotations, maxJoinAnnotations, annotations, annotations, maxJoinAnnotationBytes),
			Message: fmt.Sprintf("a join request holds one certificate request of at most %d bytes, at most %d annotations of %d bytes, "+
				"and no labels, finalizers or owners", maxJoinRequestBytes, maxJoinAnnotations, maxJoinAnnotationBytes),
		})
}

func bootstrap(*spec.Cluster) []Object {
	binding := func(name, role, kind, subject string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: kind, Name: subject}},
		}
	}
	const approver = "clusterforge:csr-approver"
	approverRole := func(namespace string, rules []rbacv1.PolicyRule) Object {
		return &rbacv1.Role{ObjectMeta: meta(namespace, approver, nil), Rules: rules}
	}
	approverBinding := func(namespace string) Object {
		return &rbacv1.RoleBinding{ObjectMeta: meta(namespace, approver, nil),
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: approver},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: pki.CSRApproverUser}}}
	}
	return append(joinRequests(), []Object{
		// Create and read by name, no list or watch (unlike system:node-bootstrapper): a request
		// carries its instance's attested document, which no other token holder should read.
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: NodeJoinRole}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get"}},
		}},
		binding(NodeJoinRole, NodeJoinRole, rbacv1.GroupKind, pki.BootstrapGroup),
		// No selfnodeclient grant: kube-controller-manager approves no renewal, clusterforge-csr-approver
		// does, once the node has proved its instance again.
		// kube-proxy runs on each worker with the node's client certificate (machine.kubeProxy).
		binding("clusterforge:node-proxier", "system:node-proxier", rbacv1.GroupKind, pki.NodesGroup),
		// azure-npm runs on each worker with it too (machine.networkPolicy): a policy selects pods
		// of every namespace, so each node reads them all (as nodes did before the node
		// authorizer's field selectors): specs and labels, never a Secret.
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyRole}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{networkingv1.GroupName}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
		}},
		binding(NetworkPolicyRole, NetworkPolicyRole, rbacv1.GroupKind, pki.NodesGroup),
		binding("clusterforge:apiserver-kubelet-client", "system:kubelet-api-admin", rbacv1.UserKind, pki.APIServerKubeletUser),
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: approver}, Rules: []rbacv1.PolicyRule{
			// Refused join requests are deleted at once (csrapprover).
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch", "delete"}},
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval"}, Verbs: []string{"update"}},
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{certv1.KubeletServingSignerName, certv1.KubeAPIServerClientKubeletSignerName}, Verbs: []string{"approve"}},
			// Placement labels on each worker's Node (wellknown.PlacementLabels).
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		}},
		binding(approver, approver, rbacv1.UserKind, pki.CSRApproverUser),
		approverRole(SystemNamespace, leaderElection(machine.CSRApproverLease)),
		approverBinding(SystemNamespace),
		// A join for a node that still renews its lease is refused: its instance has its identity.
		approverRole(corev1.NamespaceNodeLease, []rbacv1.PolicyRule{{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{"get"}}}),
		approverBinding(corev1.NamespaceNodeLease),
	}...)
}

// JoinTokenSecrets are the pools' join tokens (pki.JoinToken of seed), valid until expires
// (pki.BootstrapTokenWindow); the tokencleaner controller deletes each then. A token authenticates
// only (no signing), into pki.BootstrapGroup and its pool's pki.PoolJoinGroup: as its own user, so
// API priority and fairness queues each pool's joins apart.
func JoinTokenSecrets(c *spec.Cluster, seed string, expires time.Time) ([]*corev1.Secret, error) {
	var secrets []*corev1.Secret
	ids := map[string]string{}
	for _, p := range c.Pools {
		m := bootstrapTokenFormat.FindStringSubmatch(pki.JoinToken(seed, p.Name))
		if m == nil {
			return nil, fmt.Errorf("pool %s's join token: not <6 of [a-z0-9]>.<16 of [a-z0-9]> (no seed?)", p.Name)
		}
		if other, ok := ids[m[1]]; ok {
			return nil, fmt.Errorf("pools %s and %s have one join token id, %s: issue another seed", other, p.Name, m[1])
		}
		ids[m[1]] = p.Name
		s := &corev1.Secret{
			ObjectMeta: meta(SystemNamespace, "bootstrap-token-"+m[1], nil),
			Type:       corev1.SecretTypeBootstrapToken,
			StringData: map[string]string{
				"description":                    "clusterforge join token of pool " + p.Name,
				"token-id":                       m[1],
				"token-secret":                   m[2],
				"expiration":                     expires.UTC().Format(time.RFC3339),
				"usage-bootstrap-authentication": "true",
				"auth-extra-groups":              pki.BootstrapGroup + "," + pki.PoolJoinGroup(p.Name),
			},
		}
		if err := finish(s, "bootstrap"); err != nil {
			return nil, err
		}
		secrets = append(secrets, s)
	}
	return secrets, nil
}
