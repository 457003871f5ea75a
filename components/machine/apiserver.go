package machine

import (
	"strconv"
	"strings"

	"golang.org/x/mod/semver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Files of the apiserver machines.
const (
	AuditPolicyPath  = KubeDir + "/audit-policy.yaml"
	AuthnConfigPath  = KubeDir + "/authentication.yaml"
	EncryptionConfig = KubeDir + "/encryption.yaml"
	AdmissionConfig  = KubeDir + "/admission.yaml"
	// WebhookKubeconfig gives the apiserver its client certificate for the webhooks that ask.
	WebhookKubeconfig = KubeDir + "/admission-webhooks.kubeconfig"
	APIServerUnit     = "kube-apiserver.service"
)

// EventsOverrideFlag is the kube-apiserver flag that stores Events in their own etcd (L03).
const EventsOverrideFlag = "etcd-servers-overrides"

// APIServerFlags are the kube-apiserver flags.
func APIServerFlags(c *spec.Cluster) Flags {
	var main, events spec.EtcdCluster
	for _, e := range c.EtcdClusters() {
		if e.Role == spec.RoleEtcdMain {
			main = e
		} else {
			events = e
		}
	}
	a := c.APIServer
	flags := Flags{
		"advertise-address": "${NODE_IP}",
		"bind-address":      "0.0.0.0", // the load balancer probes NODE_IP; local components dial 127.0.0.1
		"secure-port":       strconv.Itoa(wellknown.APIServerPort),
		// Each apiserver holds a lease and publishes itself; replaces --apiserver-count (L05).
		"endpoint-reconciler-type": "lease",

		"etcd-servers": strings.Join(main.ClientURLs(), ","),
		// Events live in their own etcd cluster (L03); servers are separated by ';'.
		EventsOverrideFlag:         "/events#" + strings.Join(events.ClientURLs(), ";"),
		"etcd-cafile":              CertPath(etcdPKIDir, pki.EtcdServersCA),
		"etcd-certfile":            CertPath(etcdPKIDir, pki.APIServerEtcdClient),
		"etcd-keyfile":             KeyPath(etcdPKIDir, pki.APIServerEtcdClient),
		"etcd-compaction-interval": a.EtcdCompactionInterval, // L04

		// Inflight limits sized from the node count (L09).
		"max-requests-inflight":          strconv.Itoa(a.MaxRequestsInflight),
		"max-mutating-requests-inflight": strconv.Itoa(a.MaxMutatingRequestsInflight),
		// Nudges long-lived HTTP/2 clients to reconnect so load spreads over all apiservers (L05).
		"goaway-chance": "0.001",
		// A stopping apiserver fails /readyz but serves on until the load balancer has taken it
		// out, then answers 429 with Retry-After, which clients retry elsewhere: rolls lose no request.
		"shutdown-delay-duration":   strconv.Itoa(spec.APIServerShutdownDelaySeconds) + "s",
		"shutdown-send-retry-after": "true",

		// Audit logs found the LIST storms (L06).
		"audit-log-path":      AuditLogPath,
		"audit-log-maxbackup": strconv.Itoa(a.AuditLogMaxBackup),
		"audit-log-maxsize":   strconv.Itoa(a.AuditLogMaxSizeMB),
		"audit-log-maxage":    "30", // CIS 1.2.17
		"audit-policy-file":   AuditPolicyPath,

		// Admission webhooks (clusterforge-ops) are dialled at their pods' VNet addresses: the
		// apiserver machines run no kube-proxy to reach a Service's cluster IP.
		"enable-aggregator-routing": "true",

		"authentication-config":         AuthnConfigPath,
		"authorization-mode":            "Node,RBAC",
		"enable-bootstrap-token-auth":   "true",
		"enable-admission-plugins":      "NodeRestriction,DenyServiceExternalIPs,EventRateLimit", // CIS 1.2.3, 1.2.9
		"admission-control-config-file": AdmissionConfig,
		// Secrets are encrypted in etcd (CIS 1.2.27, 1.2.28).
		"encryption-provider-config": EncryptionConfig,
		"client-ca-file":             CertPath("", pki.ClusterCA),
		"tls-cert-file":              CertPath("", pki.APIServer),
		"tls-private-key-file":       KeyPath("", pki.APIServer),
		"tls-cipher-suites":          tlsCipherSuites,
		"tls-min-version":            "VersionTLS12",

		"kubelet-client-certificate": CertPath("", pki.APIServerKubeletClient),
		"kubelet-client-key":         KeyPath("", pki.APIServerKubeletClient),
		// Kubelets serve certificates from an authority of their own (serverTLSBootstrap), issued
		// only when clusterforge-csr-approver has checked the node's identity (CIS 1.2.5).
		"kubelet-certificate-authority":   CertPath("", pki.KubeletServingCA),
		"kubelet-preferred-address-types": "InternalIP",

		"proxy-client-cert-file":             CertPath("", pki.FrontProxyClient),
		"proxy-client-key-file":              KeyPath("", pki.FrontProxyClient),
		"requestheader-client-ca-file":       CertPath("", pki.FrontProxyCA),
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",

		// Tokens name the public issuer Entra ID trusts (Workload Identity).
		// Projected tokens expire when they say, not a year later (CIS 1.2.30).
		"service-account-extend-token-expiration": "false",
		"service-account-issuer":                  c.ServiceAccountIssuer(),
		"service-account-jwks-uri":                pki.IssuerKeysURL(c.ServiceAccountIssuer()),
		"service-account-key-file":                CertPath("", pki.ServiceAccountKey),
		"service-account-signing-key-file":        KeyPath("", pki.ServiceAccountKey),
		"service-cluster-ip-range":                c.Network.ServiceCIDR,

		"allow-privileged": "true",
		"profiling":        "false",
		"event-ttl":        "1h",
	}
	if GangScheduling(c) {
		// PodGroups and Workloads (L16): a beta API, off unless asked for.
		flags["feature-gates"] = featureGates(c)
		flags["runtime-config"] = GangAPI + "=true"
	}
	return flags
}

func apiserver(c *spec.Cluster, b pki.Bundle) part {
	files := []File{
		{Path: CertPath(etcdPKIDir, pki.EtcdServersCA), Content: b.Trust(pki.EtcdServerCAs(c)...), Mode: certMode},
		{Path: CertPath("", pki.FrontProxyCA), Content: b.Pair(pki.FrontProxyCA).CertPEM, Mode: certMode},
		{Path: AuditPolicyPath, Content: auditPolicy, Mode: 0o600},
		{Path: AuthnConfigPath, Content: authenticationConfig, Mode: 0o600},
		{Path: AdmissionConfig, Content: admissionConfig(c), Mode: 0o600},
		{Path: WebhookKubeconfig, Content: webhookKubeconfig, Mode: 0o600},
		{Path: EncryptionConfig, Content: encryptionConfig(b.EncryptionKey), Mode: 0o600},
	}
	// The authorities' keys sign the kubelets' client and serving certificates (controller-manager).
	files = append(files, pairFiles("", pki.ClusterCA, b.Pair(pki.ClusterCA))...)
	files = append(files, pairFiles("", pki.KubeletServingCA, b.Pair(pki.KubeletServingCA))...)
	files = append(files, pairFiles("", pki.ServiceAccountKey, b.Pair(pki.ServiceAccountKey))...)
	files = append(files, pairFiles(etcdPKIDir, pki.APIServerEtcdClient, b.Pair(pki.APIServerEtcdClient))...)
	for _, name := range []string{pki.APIServer, pki.APIServerKubeletClient, pki.APIServerWebhookClient, pki.FrontProxyClient} {
		files = append(files, pairFiles("", name, b.Pair(name))...)
	}
	return part{
		files: files,
		units: []Unit{service{
			name: "kube-apiserver", description: "Kubernetes API server",
			after: []string{identityUnit}, requires: []string{identityUnit},
			binary: BinDir + "/kube-apiserver", flags: APIServerFlags(c),
			envFiles: []string{NodeEnvFile}, limitNoFile: true,
		}.unit()},
	}
}

// authenticationConfig allows anonymous requests only on the health endpoints the load balancer and
// the scale set's health extension probe; everything else needs a certificate or token (CIS 1.2.1).
const authenticationConfig = `apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
anonymous:
  enabled: true
  conditions:
  - path: /livez
  - path: /readyz
  - path: /healthz
`

// Pod Security (CIS 5.2): every namespace enforces PodSecurityDefault unless its labels say
// otherwise, with the checks of the cluster's own minor version (pinned, not "latest", so what is
// admitted is what that release documents).
// kube-system is exempt: only the platform creates pods there, and its node agents need the host.
// Levels are per namespace in docs/operations/tenants.md.
const PodSecurityDefault = psaapi.LevelBaseline

// PodSecurityExempt are the namespaces Pod Security does not apply to.
var PodSecurityExempt = []string{metav1.NamespaceSystem}

// PodSecurityVersion is the policy version enforced: the cluster's minor, such as "v1.37".
func PodSecurityVersion(c *spec.Cluster) string { return semver.MajorMinor(c.Versions.Kubernetes) }

// admissionConfig sets Pod Security's defaults (above), gives the webhooks' client certificate
// (WebhookKubeconfig) and caps the event write rate (L03: events are the busiest writes and live
// in their own etcd; a crash-looping workload or a node storm must not flood it). Rejected events
// are dropped by their senders, which is what events are for. Limits are per second.
func admissionConfig(c *spec.Cluster) string {
	version := PodSecurityVersion(c)
	return `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: ` + string(PodSecurityDefault) + `
      enforce-version: ` + version + `
      audit: ` + string(psaapi.LevelRestricted) + `
      audit-version: ` + version + `
      warn: ` + string(psaapi.LevelRestricted) + `
      warn-version: ` + version + `
    exemptions:
      namespaces: [` + strings.Join(PodSecurityExempt, ", ") + `]
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: ` + WebhookKubeconfig + `
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: ` + WebhookKubeconfig + `
- name: EventRateLimit
  configuration:
    apiVersion: eventratelimit.admission.k8s.io/v1alpha1
    kind: Configuration
    limits:
    - type: Server
      qps: 2000
      burst: 4000
    - type: Namespace
      qps: 200
      burst: 400
      cacheSize: 4096
`
}

// webhookKubeconfig: the apiserver presents its webhook client certificate to clusterforge-ops,
// by the host and port it dials (a user per webhook; others get no certificate).
var webhookKubeconfig = `apiVersion: v1
kind: Config
users:
- name: ` + wellknown.OpsServiceHost + ":" + strconv.Itoa(wellknown.OpsServicePort) + `
  user:
    client-certificate: ` + CertPath("", pki.APIServerWebhookClient) + `
    client-key: ` + KeyPath("", pki.APIServerWebhookClient) + `
`

// encryptionConfig encrypts Secrets at rest with secretbox (XSalsa20-Poly1305); identity last
// so Secrets written before encryption was enabled stay readable.
func encryptionConfig(key string) string {
	return `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - secretbox:
      keys:
      - name: key1
        secret: ` + key + `
  - identity: {}
`
}

// auditPolicy records who did what without drowning the disk: metadata for reads of large
// collections (the LIST storms of L06), request bodies for writes, nothing for health checks and
// the noisy system watchers.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
- RequestReceived
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version", "/metrics"]
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
# Events' and leases' writes and gets are most of the traffic; their lists and watches, the
# reads that load a large cluster (L07), are kept.
- level: None
  verbs: ["get", "create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["events"]
  - group: "coordination.k8s.io"
    resources: ["leases"]
# Never a body that holds a credential: Secrets, TokenRequests (serviceaccounts/token) and
# TokenReviews carry tokens.
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "configmaps", "serviceaccounts/token"]
  - group: "authentication.k8s.io"
    resources: ["tokenreviews"]
- level: Metadata
  verbs: ["get", "list", "watch"]
- level: Request
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: Metadata
`
