package machine

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Files of the controller-manager and scheduler, colocated with the apiserver (L05).
const (
	ControllerManagerKubeconfig = KubeDir + "/controller-manager.conf"
	CSRApproverKubeconfig       = KubeDir + "/csr-approver.conf"
	SchedulerKubeconfig         = KubeDir + "/scheduler.conf"
	SchedulerConfigPath         = KubeDir + "/scheduler.yaml"
)

// ControllerManagerFlags are the kube-controller-manager flags.
func ControllerManagerFlags(c *spec.Cluster) Flags {
	// Client QPS grows with the node count so node and pod lifecycles keep up (L09).
	qps := max(20, c.TargetNodes/50)
	flags := Flags{
		"kubeconfig":                ControllerManagerKubeconfig,
		"authentication-kubeconfig": ControllerManagerKubeconfig,
		"authorization-kubeconfig":  ControllerManagerKubeconfig,
		"bind-address":              "127.0.0.1",
		"leader-elect":              "true",
		"cluster-name":              c.Name,
		// One authority per signer in use: kubelet clients by the cluster CA, which the apiservers
		// trust for clients; kubelet serving by its own, which only the apiservers' kubelet client
		// trusts. The other signers (kube-apiserver-client, legacy-unknown) sign nothing.
		"cluster-signing-kubelet-client-cert-file":  CertPath("", pki.ClusterCA),
		"cluster-signing-kubelet-client-key-file":   KeyPath("", pki.ClusterCA),
		"cluster-signing-kubelet-serving-cert-file": CertPath("", pki.KubeletServingCA),
		"cluster-signing-kubelet-serving-key-file":  KeyPath("", pki.KubeletServingCA),
		"root-ca-file":                     CertPath("", pki.ClusterCA),
		"service-account-private-key-file": KeyPath("", pki.ServiceAccountKey),
		"use-service-account-credentials":  "true",
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		// Pod IPs come from the VNet (Azure CNI, L29), not from per-node CIDRs.
		"allocate-node-cidrs":         "false",
		"service-cluster-ip-range":    c.Network.ServiceCIDR,
		"kube-api-qps":                strconv.Itoa(qps),
		"kube-api-burst":              strconv.Itoa(2 * qps),
		"terminated-pod-gc-threshold": "12500",
		"profiling":                   "false",
		"tls-cipher-suites":           tlsCipherSuites,
	}
	if GangScheduling(c) {
		// The PodGroup protection controller keeps a gang's PodGroup while its pods exist (L16).
		flags["feature-gates"] = featureGates(c)
	}
	return flags
}

// GangSchedulingSince is the Kubernetes minor whose scheduler places a PodGroup's pods all or
// none (L16): the Workload API (scheduling.k8s.io/v1beta1, feature GenericWorkload) is beta
// there, though off by default. Older minors, where it is alpha, run without gangs.
const GangSchedulingSince = "v1.37"

// GangScheduling reports whether c's control plane schedules gangs.
func GangScheduling(c *spec.Cluster) bool {
	return semver.Compare(semver.MajorMinor(c.Versions.Kubernetes), GangSchedulingSince) >= 0
}

// GangAPI is the API group version of PodGroups and Workloads, which the apiservers serve.
const GangAPI = wellknown.SchedulingGroup + "/v1beta1"

// featureGates are the gates the control plane's components turn on, extra first. With gangs
// comes the alpha TopologyAwareWorkloadScheduling: it alone places a gang whole within one value
// of a node label (wellknown.GangDomainLabel: one InfiniBand fabric), choosing among domains
// for the gang rather than following its first pod (docs/design/gangs.md).
func featureGates(c *spec.Cluster, extra ...string) string {
	if GangScheduling(c) {
		extra = append(extra, "GenericWorkload=true", "TopologyAwareWorkloadScheduling=true")
	}
	return strings.Join(extra, ",")
}

// localClient is a control-plane component's own identity: its certificate and key, and a
// kubeconfig that presents them to the apiserver on the same machine.
func localClient(b pki.Bundle, name, kubeconfig string) []File {
	return append(pairFiles("", name, b.Pair(name)), File{Path: kubeconfig, Mode: 0o600,
		Content: Kubeconfig(localAPIServer, CertPath("", pki.ClusterCA), CertPath("", name), KeyPath("", name))})
}

func controllerManager(c *spec.Cluster, b pki.Bundle) part {
	files := localClient(b, pki.ControllerManager, ControllerManagerKubeconfig)
	return part{files: files, units: []Unit{service{
		name: "kube-controller-manager", description: "Kubernetes controller manager",
		after: []string{identityUnit, APIServerUnit}, requires: []string{identityUnit}, binary: BinDir + "/kube-controller-manager",
		flags: ControllerManagerFlags(c),
	}.unit()}}
}

// SchedulerFlags are the kube-scheduler flags; the behaviour lives in its config file.
func SchedulerFlags(c *spec.Cluster) Flags {
	return Flags{
		"config":                    SchedulerConfigPath,
		"profiling":                 "false", // the config says so too; CIS 1.4.1 reads the flag
		"authentication-kubeconfig": SchedulerKubeconfig,
		"authorization-kubeconfig":  SchedulerKubeconfig,
		"bind-address":              "127.0.0.1",
		"tls-cipher-suites":         tlsCipherSuites,
		// Its pod and node informers stream their initial state from the watch cache rather than
		// LIST every pod after each restart: the default since 1.35, said here so a change of it shows.
		"feature-gates": featureGates(c, "WatchListClient=true"),
	}
}

// SchedulerConfig is the profile of the kube-scheduler the apiserver machines run. With the
// Workload API on (GangScheduling), its GangScheduling plugin holds a PodGroup's pods at Permit
// until minCount of them fit, so two jobs that each want the whole pool cannot deadlock at half
// each (L16). Scoring bin-packs (L12): NodeResourcesFit scores MostAllocated, GPUs weighted above
// CPU and memory so whole GPU nodes stay free for big jobs, and InterPodAffinity weighs 2.
// NodeResourcesBalancedAllocation is off: it favours the emptier of two nodes whose CPU and memory
// use differ, which cancelled MostAllocated on 16-CPU nodes in the rehearsal.
func SchedulerConfig() string {
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ` + SchedulerKubeconfig + `
leaderElection:
  leaderElect: true
enableProfiling: false
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      enabled:
      - name: NodeResourcesFit
        weight: 1
      - name: InterPodAffinity
        weight: 2
      disabled:
      - name: NodeResourcesBalancedAllocation
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: cpu
          weight: 1
        - name: memory
          weight: 1
        - name: nvidia.com/gpu
          weight: 5
`
}

// scheduler is kube-scheduler, which places gangs whole (L16).
func scheduler(c *spec.Cluster, b pki.Bundle) part {
	files := append(localClient(b, pki.Scheduler, SchedulerKubeconfig), File{Path: SchedulerConfigPath, Content: SchedulerConfig(), Mode: 0o644})
	return part{files: files, units: []Unit{service{
		name: "kube-scheduler", description: "Kubernetes scheduler",
		after: []string{identityUnit, APIServerUnit}, requires: []string{identityUnit}, binary: BinDir + "/kube-scheduler",
		flags: SchedulerFlags(c),
	}.unit()}}
}

// CSRApproverLease is the lease the approvers of the apiserver machines elect their leader with.
const CSRApproverLease = "clusterforge-csr-approver"

// CSRApproverUnit is the approver's unit on the apiserver machines.
const CSRApproverUnit = "clusterforge-csr-approver.service"

// CSRApproverFlags are clusterforge-csr-approver's flags.
func CSRApproverFlags(c *spec.Cluster) Flags {
	var members []string
	for _, e := range c.EtcdClusters() {
		for _, m := range e.Members {
			members = append(members, fmt.Sprintf("%s:%d", m.IP, wellknown.EtcdClientPort))
		}
	}
	return Flags{
		"kubeconfig":   CSRApproverKubeconfig,
		"node-subnets": strings.Join(c.NodeSubnets(), ","),
		"identity":     "${NODE_NAME}",
		"lease":        CSRApproverLease,
		// A joining node's instance must be in this machine's subscription and resource group,
		// and boot a version of one of these images.
		"provider-id":              "${PROVIDER_ID}",
		"worker-image-definitions": strings.Join(c.WorkerImageDefinitions(), ","),
		// Certificate expiry for Prometheus (CertificateExpiringSoon): this machine's files and the
		// serving certificates of every etcd member, which only the apiservers may reach.
		"metrics-address":       fmt.Sprintf("${NODE_IP}:%d", wellknown.CertificateMetricsPort),
		"certificates-dir":      PKIDir,
		"certificate-endpoints": strings.Join(members, ","),
	}
}

// csrApprover approves joining nodes' client certificates and kubelet serving certificates whose
// names are the node's own (components/csrapprover), with an identity of its own.
func csrApprover(c *spec.Cluster, b pki.Bundle) part {
	return part{files: localClient(b, pki.CSRApprover, CSRApproverKubeconfig), units: []Unit{service{
		name: strings.TrimSuffix(CSRApproverUnit, ".service"), description: "clusterforge: approve the certificates of real nodes",
		after: []string{identityUnit, APIServerUnit}, requires: []string{identityUnit},
		binary: BinDir + "/clusterforge-csr-approver", flags: CSRApproverFlags(c), envFiles: []string{NodeEnvFile},
	}.unit()}}
}
