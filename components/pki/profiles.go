// Package pki defines, once, every certificate authority and leaf certificate a cluster uses:
// subject, SANs and usages. The Azure program issues them with the Pulumi TLS provider (so they
// live in state and stay stable across `pulumi up`); the rehearsal issues a throwaway set from
// the same profiles with Issue. Nothing here imports Pulumi.
package pki

import (
	"fmt"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Names of the authorities and leaf certificates. A name is also the file stem on the machine.
const (
	ClusterCA    = "kubernetes-ca"
	FrontProxyCA = "front-proxy-ca"
	// EtcdClientCA issues the apiserver's etcd client certificate, which every etcd cluster
	// accepts as a client and none as a peer. Each etcd cluster's own CA is EtcdCA.
	EtcdClientCA = "etcd-client-ca"
	// WebhookClientCA issues only the apiservers' webhook client certificate, so no other
	// certificate (the cluster CA signs what CSRs ask) can pose as the apiserver to a webhook.
	WebhookClientCA = "webhook-client-ca"
	// KubeletServingCA signs the kubelets' serving certificates (kube-controller-manager's
	// kubelet-serving signer) and is trusted by the apiservers' kubelet client alone: a node's
	// serving certificate, whatever it names, convinces no pod and no webhook client.
	KubeletServingCA = "kubelet-serving-ca"
	// WebhookServingCA issues only clusterforge-ops's serving pair, so the webhooks' caBundle
	// trusts nothing a CSR can buy.
	WebhookServingCA = "webhook-serving-ca"

	// Trust bundles: several authorities in one file, named like a certificate.
	// EtcdServersCA verifies the serving certificates of every etcd cluster (the apiserver's
	// --etcd-cafile); EtcdClientsCA, on an etcd machine, verifies its clients: the apiserver and
	// the members themselves (the join script, the backup agent).
	EtcdServersCA = "etcd-servers-ca"
	EtcdClientsCA = "etcd-clients-ca"

	APIServer              = "apiserver"
	APIServerEtcdClient    = "apiserver-etcd-client"
	APIServerKubeletClient = "apiserver-kubelet-client"
	FrontProxyClient       = "front-proxy-client"
	ControllerManager      = "controller-manager"
	Scheduler              = "scheduler"
	CSRApprover            = "csr-approver"
	// APIServerWebhookClient is the apiservers' client certificate towards clusterforge-ops's
	// admission webhooks, which answer no one else.
	APIServerWebhookClient = "apiserver-webhook-client"
	// Admin is the operators' system:masters credential. It lives only in Pulumi state (the stack's
	// kubeconfig output) and the rehearsal's directory, never on a machine.
	Admin = "admin"
	// OperatorEtcdClient is the operators' etcd client (the stack's etcdClient output, for `make
	// roll`), as short-lived as Admin, so the apiservers' own is in no output.
	OperatorEtcdClient = "operator-etcd-client"

	// OpsWebhook is the serving pair of clusterforge-ops's admission webhooks, held in a Secret,
	// not on a machine; the apiservers trust it through WebhookServingCA in the webhooks' caBundle.
	OpsWebhook = "ops-webhook"

	// ServiceAccountKey is the key pair that signs service-account tokens (no certificate).
	ServiceAccountKey = "service-account"
)

// ServiceAccountKeyBits is the size of the service-account key, the one RSA key: Entra ID takes
// only RSA-signed assertions in a token exchange (an ES256 one fails with AADSTS5002738), and the
// control loops' Azure credentials are those tokens exchanged (Workload Identity).
const ServiceAccountKeyBits = 2048

// EtcdCA, EtcdServer and EtcdPeer name an etcd cluster's authority and its serving and peer
// certificates. An authority per cluster: a member of one is never a peer of the other.
func EtcdCA(role string) string     { return role + "-ca" }
func EtcdServer(role string) string { return role + "-server" }
func EtcdPeer(role string) string   { return role + "-peer" }

// EtcdServerCAs are the authorities in EtcdServersCA: every etcd cluster's.
func EtcdServerCAs(c *spec.Cluster) []string {
	var names []string
	for _, e := range c.EtcdClusters() {
		names = append(names, EtcdCA(e.Role))
	}
	return names
}

// EtcdClientCAs are the authorities in role's EtcdClientsCA.
func EtcdClientCAs(role string) []string { return []string{EtcdClientCA, EtcdCA(role)} }

// Usage is a key usage, spelled as the Pulumi TLS provider's allowed_uses.
type Usage string

const (
	DigitalSignature Usage = "digital_signature"
	KeyEncipherment  Usage = "key_encipherment"
	CertSigning      Usage = "cert_signing"
	ServerAuth       Usage = "server_auth"
	ClientAuth       Usage = "client_auth"
)

var (
	caUsages     = []Usage{CertSigning, DigitalSignature, KeyEncipherment}
	serverUsages = []Usage{DigitalSignature, KeyEncipherment, ServerAuth}
	clientUsages = []Usage{DigitalSignature, KeyEncipherment, ClientAuth}
	// peerUsages: etcd peers dial each other, so a peer cert is both server and client.
	peerUsages = []Usage{DigitalSignature, KeyEncipherment, ServerAuth, ClientAuth}
)

// Validity periods, in hours.
const (
	CAValidityHours   = 10 * 365 * 24
	LeafValidityHours = 2 * 365 * 24
	// EarlyRenewalHours: a `pulumi up` within 30 days of expiry renews the leaf.
	EarlyRenewalHours = 30 * 24
	// AdminValidityHours keeps the operators' credentials (system:masters, etcd) short-lived: a
	// copied kubeconfig is dead within a month, and any `pulumi up` in its last 10 days issues the next.
	AdminValidityHours     = 30 * 24
	AdminEarlyRenewalHours = 10 * 24
)

// NodeClientLifetime is how long a kubelet's client certificate lives. The node renews it when
// half of it is left, each time proving its instance again with an attested document
// (components/nodejoin), so a copy taken off the machine, or the certificate of an instance that
// is gone, dies within it.
const NodeClientLifetime = 48 * time.Hour

// User names (certificate CNs) that RBAC binds.
const (
	// CSRApproverUser approves kubelet serving certificates.
	CSRApproverUser = "clusterforge:csr-approver"
	// APIServerKubeletUser is the apiserver when it calls kubelets (logs, exec).
	APIServerKubeletUser = "kube-apiserver-kubelet-client"
	// APIServerWebhookUser is the apiserver when it calls clusterforge-ops's webhooks.
	APIServerWebhookUser = "kube-apiserver-webhook-client"
	// NodesGroup is the group of every kubelet's client certificate (its Organization), and
	// NodeUserPrefix begins its user name (its CommonName), the node's name following.
	NodesGroup     = "system:nodes"
	NodeUserPrefix = "system:node:"
	// MastersGroup is Kubernetes' group of unrestricted administrators, the admin certificate's.
	MastersGroup = "system:masters"
	// BootstrapGroup is the extra group of every worker join token; each pool's token has
	// PoolJoinGroup too.
	BootstrapGroup = "system:bootstrappers:clusterforge:worker"
)

// PoolJoinGroup is the extra group of pool's join token: the CSR approver joins an instance only
// with its own pool's token, so a token taken from one pool's machines joins none of another's.
func PoolJoinGroup(pool string) string { return BootstrapGroup + ":pool:" + pool }

// Authority is a self-signed certificate authority.
type Authority struct {
	Name       string
	CommonName string
	Usages     []Usage
}

// Profile is one leaf certificate issued by an Authority.
type Profile struct {
	Name         string
	Issuer       string
	CommonName   string
	Organization string
	DNSNames     []string
	IPAddresses  []string
	Usages       []Usage
	// ValidityHours and EarlyRenewalHours default to LeafValidityHours and EarlyRenewalHours.
	ValidityHours, EarlyRenewalHours int
}

// Validity is the profile's lifetime and how long before its end `pulumi up` renews it, in hours.
func (p Profile) Validity() (hours, earlyRenewal int) {
	if p.ValidityHours == 0 {
		return LeafValidityHours, EarlyRenewalHours
	}
	return p.ValidityHours, p.EarlyRenewalHours
}

// Authorities are the cluster's CAs: Kubernetes, front proxy, etcd clients, webhook clients,
// kubelet serving, webhook serving and one per etcd cluster.
func Authorities(c *spec.Cluster) []Authority {
	authorities := []Authority{
		{Name: ClusterCA, CommonName: c.Name + "-kubernetes-ca", Usages: caUsages},
		{Name: FrontProxyCA, CommonName: c.Name + "-front-proxy-ca", Usages: caUsages},
	}
	for _, name := range append([]string{EtcdClientCA, WebhookClientCA, KubeletServingCA, WebhookServingCA}, EtcdServerCAs(c)...) {
		authorities = append(authorities, Authority{Name: name, CommonName: c.Name + "-" + name, Usages: caUsages})
	}
	return authorities
}

// Profiles are every leaf certificate the cluster's machines hold, and the ops webhooks' serving
// pair. Workers hold none: each gets its kubelet's through the attested join (components/nodejoin).
func Profiles(c *spec.Cluster) []Profile {
	var profiles []Profile
	for _, e := range c.EtcdClusters() {
		// One serving and one peer certificate per etcd cluster, valid for every member's
		// stable address, so all members of a role boot from the same user-data.
		names := []string{"localhost"}
		for _, m := range e.Members {
			names = append(names, m.Name)
		}
		ips := append([]string{"127.0.0.1"}, e.IPs()...)
		profiles = append(profiles,
			Profile{Name: EtcdServer(e.Role), Issuer: EtcdCA(e.Role), CommonName: e.Role, DNSNames: names, IPAddresses: ips, Usages: peerUsages},
			Profile{Name: EtcdPeer(e.Role), Issuer: EtcdCA(e.Role), CommonName: e.Role + "-peer", DNSNames: names, IPAddresses: ips, Usages: peerUsages},
		)
	}
	return append(profiles,
		Profile{
			Name: APIServer, Issuer: ClusterCA, CommonName: "kube-apiserver",
			DNSNames: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc." + wellknown.ClusterDomain, "localhost", c.Name + "-apiserver"},
			IPAddresses: []string{c.Network.APIServerIP, c.KubernetesServiceIP(), "127.0.0.1"},
			Usages:      serverUsages,
		},
		Profile{Name: APIServerEtcdClient, Issuer: EtcdClientCA, CommonName: "kube-apiserver-etcd-client", Usages: clientUsages},
		Profile{Name: APIServerKubeletClient, Issuer: ClusterCA, CommonName: APIServerKubeletUser, Usages: clientUsages},
		Profile{Name: APIServerWebhookClient, Issuer: WebhookClientCA, CommonName: APIServerWebhookUser, Usages: clientUsages},
		Profile{Name: FrontProxyClient, Issuer: FrontProxyCA, CommonName: "front-proxy-client", Usages: clientUsages},
		Profile{Name: ControllerManager, Issuer: ClusterCA, CommonName: "system:kube-controller-manager", Usages: clientUsages},
		Profile{Name: Scheduler, Issuer: ClusterCA, CommonName: "system:kube-scheduler", Usages: clientUsages},
		Profile{Name: CSRApprover, Issuer: ClusterCA, CommonName: CSRApproverUser, Usages: clientUsages},
		Profile{Name: Admin, Issuer: ClusterCA, CommonName: "clusterforge-admin", Organization: MastersGroup, Usages: clientUsages,
			ValidityHours: AdminValidityHours, EarlyRenewalHours: AdminEarlyRenewalHours},
		Profile{Name: OperatorEtcdClient, Issuer: EtcdClientCA, CommonName: "clusterforge-operator-etcd-client", Usages: clientUsages,
			ValidityHours: AdminValidityHours, EarlyRenewalHours: AdminEarlyRenewalHours},
		// The Service clusterforge-ops in kube-system, as the apiservers dial a webhook's service.
		Profile{Name: OpsWebhook, Issuer: WebhookServingCA, CommonName: wellknown.OpsName,
			DNSNames: []string{wellknown.OpsServiceHost, wellknown.OpsServiceHost + "." + wellknown.ClusterDomain}, Usages: serverUsages},
	)
}

// ClientOf is a client certificate of the cluster CA for user cn, in group org when org is not
// empty: for the identities the rehearsal gives its own clients (Renew issues it from a bundle).
func ClientOf(name, cn, org string) Profile {
	return Profile{Name: name, Issuer: ClusterCA, CommonName: cn, Organization: org, Usages: clientUsages}
}

// KeyPair is PEM-encoded material for one name: a certificate (CAs and leaves) and its private key.
type KeyPair struct {
	CertPEM string
	KeyPEM  string
}

// Bundle is the issued material a cluster's machines need, keyed by authority/profile name.
// The service-account entry holds the public key PEM in CertPEM.
type Bundle struct {
	Pairs map[string]KeyPair
	// JoinSeed derives each pool's join token (JoinToken); the tokens are valid until
	// BootstrapTokenExpires (BootstrapTokenWindow). Only the seed's holders have every token.
	JoinSeed              string
	BootstrapTokenExpires time.Time
	// EncryptionKey is the base64 of the EncryptionKeyBytes random bytes that encrypt Secrets in etcd.
	EncryptionKey string
}

// BootstrapTokenLifetime is how long a worker join token is valid after the start of the month
// it was issued in. Workers carry it in their scale sets' user-data, and the autoscaler adds
// nodes at any time, so it must outlive the gap between two `pulumi up`s: each month's first
// issues the next token, and the last one stays valid for at least two more months.
const BootstrapTokenLifetime = 90 * 24 * time.Hour

// BootstrapTokenWindow is the month a token issued now belongs to, "2006-01", and its expiry.
func BootstrapTokenWindow(now time.Time) (month string, expires time.Time) {
	now = now.UTC()
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start.Format("2006-01"), start.Add(BootstrapTokenLifetime)
}

// EncryptionKeyBytes is the length of the Secrets encryption key (secretbox takes 32 bytes).
const EncryptionKeyBytes = 32

// Trust is the certificates of the named authorities in one PEM bundle.
func (b Bundle) Trust(authorities ...string) string {
	var pem strings.Builder
	for _, name := range authorities {
		pem.WriteString(strings.TrimRight(b.Pair(name).CertPEM, "\n") + "\n")
	}
	return pem.String()
}

// Pair returns the named material, failing loudly on a name nobody issued.
func (b Bundle) Pair(name string) KeyPair {
	p, ok := b.Pairs[name]
	if !ok {
		panic(fmt.Sprintf("pki: bundle holds no %q", name))
	}
	return p
}
