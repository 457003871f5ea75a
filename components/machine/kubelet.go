package machine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Files of the worker kubelet.
const (
	KubeletDir                 = "/var/lib/kubelet"
	KubeletConfigPath          = KubeletDir + "/config.yaml"
	KubeletBootstrapKubeconfig = KubeDir + "/bootstrap-kubelet.kubeconfig"
	KubeletKubeconfig          = KubeletDir + "/kubeconfig"
	// GPUResource is the extended resource and taint key of GPU nodes.
	GPUResource = "nvidia.com/gpu"
)

// KubeletConfig is the worker KubeletConfiguration.
func KubeletConfig(c *spec.Cluster, pool spec.Pool) string {
	var taints strings.Builder
	for _, t := range RegisterTaints(pool) {
		fmt.Fprintf(&taints, "- key: %s\n  value: %s\n  effect: %s\n", yamlString(t.Key), yamlString(t.Value), yamlString(t.Effect))
	}
	size, _ := spec.VMCapacity(pool.VMSize) // Validate refuses sizes it does not know
	r := spec.NodeReservation(size, pool.MaxPods)
	registerWithTaints := "registerWithTaints: []\n"
	if taints.Len() > 0 {
		registerWithTaints = "registerWithTaints:\n" + taints.String()
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
cgroupDriver: systemd
clusterDNS:
- %s
clusterDomain: %s
containerRuntimeEndpoint: %s
maxPods: %d
# A pod's processes and threads: one pod cannot exhaust its node's.
podPidsLimit: %d
# Pulls run in parallel so one huge image does not block every other pod (L20).
serializeImagePulls: false
maxParallelImagePulls: %d
readOnlyPort: 0
# What the node keeps from its pods (spec.NodeReservation); allocatable is the rest.
kubeReserved:
  cpu: %dm
  memory: %dMi
systemReserved:
  cpu: %dm
  memory: %dMi
evictionHard:
  memory.available: %dMi
  nodefs.available: "10%%"
  nodefs.inodesFree: "5%%"
  imagefs.available: "15%%"
protectKernelDefaults: true
# cgroup v1 is in maintenance upstream: the kubelet refuses such a host (its default since 1.35).
`+FailCgroupV1+`: true
# clusterforge-node-renew renews the client certificate, proving the instance again each time;
# the kubelet reads the files again when they change.
rotateCertificates: false
# The serving certificate comes from an authority of its own, once clusterforge-csr-approver has
# checked the names are this node's; the apiservers alone trust it (CIS 1.2.5).
serverTLSBootstrap: true
eventRecordQPS: 5
streamingConnectionIdleTimeout: 5m
tlsMinVersion: VersionTLS12
tlsCipherSuites: [%s]
%s`, CertPath("", pki.ClusterCA), c.DNSServiceIP(), wellknown.ClusterDomain, wellknown.ContainerdEndpoint, pool.MaxPods, c.Kubelet.PodPidsLimit,
		c.Kubelet.MaxParallelImagePulls, r.KubeCPUMilli, r.KubeMemory>>20, r.SystemCPUMilli, r.SystemMemory>>20,
		r.EvictionMemory>>20, strings.ReplaceAll(tlsCipherSuites, ",", ", "), registerWithTaints)
}

// FailCgroupV1 is the kubelet setting that refuses a cgroup v1 host.
const FailCgroupV1 = "failCgroupV1"

// NodeLabels are the labels every node of a pool registers with: the pool's own, never a placement
// label (wellknown.PlacementLabels), which no kubelet may set (spec validation refuses them first).
func NodeLabels(pool spec.Pool) map[string]string {
	labels := maps.Clone(pool.Labels)
	maps.DeleteFunc(labels, func(k, _ string) bool { return slices.Contains(wellknown.PlacementLabels, k) })
	return labels
}

// NodeTemplateTags are a scale set's node-template tags: what cluster-autoscaler reads to build a
// node of an empty scale set, so a pool grows from zero as the node it gets: every label its nodes
// carry (the kubelet's and PlacementOf(set), which the CSR approver gives them), every taint they
// register with, and their GPUs. Scale sets of one InfiniBand pool differ in their gang domain, so
// the autoscaler does not balance a gang's growth across their fabrics.
func NodeTemplateTags(set spec.ScaleSet) map[string]string {
	labels, taints, gpus := TemplateNode(set)
	tags := map[string]string{}
	for k, v := range labels {
		tags[wellknown.LabelTag(k)] = v
	}
	for _, t := range taints {
		tags[wellknown.TaintTag(t.Key)] = t.Value + ":" + t.Effect
	}
	if gpus > 0 {
		tags[wellknown.ResourceTag(GPUResource)] = strconv.Itoa(gpus)
	}
	return tags
}

// PlacementOf is what the CSR approver labels a scale set's nodes with (wellknown.PlacementLabels):
// the pool and GPU labels from the scale set's tags, the gang domain from its name.
func PlacementOf(set spec.ScaleSet) map[string]string {
	labels := map[string]string{wellknown.PoolLabel: set.Pool.Name, wellknown.GangDomainLabel: set.GangDomain()}
	if set.Pool.IsGPU() {
		labels[wellknown.GPULabel] = "true"
	}
	return labels
}

// checkLabelsSplit refuses a label the kubelet would split: --node-labels is "k=v,k=v" with no
// escape, so a ',' or '=' in a key or value would add a label of its own (spec validation refuses
// them first; this keeps the renderer safe on its own).
func checkLabelsSplit(pool spec.Pool) error {
	for k, v := range pool.Labels {
		if strings.ContainsAny(k, ",=") || strings.ContainsAny(v, ",") {
			return fmt.Errorf("machine: pool %q label %s=%s would split --node-labels", pool.Name, spec.Excerpt(k), spec.Excerpt(v))
		}
	}
	return nil
}

// KubeletFlags are the worker kubelet flags.
func KubeletFlags(pool spec.Pool) Flags {
	flags := Flags{
		"config": KubeletConfigPath,
		// Written by clusterforge-node-join before the kubelet's first start (nodeJoin): no
		// bootstrap here, since a join token alone proves no node's name.
		"kubeconfig": KubeletKubeconfig,
		"node-ip":    "${NODE_IP}",
		// The scale-set instance's id, from the instance metadata: without it cluster-autoscaler
		// counts the node as unregistered and deletes the instance.
		"provider-id": "${PROVIDER_ID}",
	}
	if labels := NodeLabels(pool); len(labels) > 0 {
		pairs := make([]string, 0, len(labels))
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			pairs = append(pairs, k+"="+labels[k])
		}
		flags["node-labels"] = strings.Join(pairs, ",")
	}
	return flags
}

// NodeTaints are the pool's taints, plus nvidia.com/gpu:NoSchedule on GPU pools, which a team's
// pod may tolerate only when it asks for GPUs, and SystemPoolTaint on the system pool, which no
// team's pod may tolerate (the add-ons' placement policy).
func NodeTaints(pool spec.Pool) []spec.Taint {
	taints := slices.Clone(pool.Taints)
	if pool.IsGPU() && !slices.ContainsFunc(taints, func(t spec.Taint) bool { return t.Key == GPUResource }) {
		taints = append(taints, spec.Taint{Key: GPUResource, Value: "present", Effect: "NoSchedule"})
	}
	if pool.System && !slices.ContainsFunc(taints, func(t spec.Taint) bool { return t.Key == wellknown.SystemTaint }) {
		taints = append(taints, SystemPoolTaint)
	}
	return taints
}

// SystemPoolTaint keeps every pod but the platform's off the system pool: the add-ons pinned there
// tolerate it, and a team's pod may not.
var SystemPoolTaint = spec.Taint{Key: wellknown.SystemTaint, Value: "true", Effect: "NoSchedule"}

// PreflightTaint keeps work off a GPU node from its registration until its preflight tests pass
// and the preflight agent removes it (L36). cluster-autoscaler counts it as a startup taint.
var PreflightTaint = spec.Taint{Key: wellknown.PreflightTaint, Value: wellknown.PreflightPending, Effect: "NoSchedule"}

// RegisterTaints are the taints the kubelet registers with: the pool's (NodeTaints), plus the
// preflight taint on GPU pools. Pods pinned to a pool tolerate NodeTaints only.
func RegisterTaints(pool spec.Pool) []spec.Taint {
	taints := NodeTaints(pool)
	if pool.IsGPU() {
		taints = append(taints, PreflightTaint)
	}
	return taints
}

// BootstrapKubeconfig authenticates a new worker's certificate request with the join token.
func BootstrapKubeconfig(server, token string) string {
	return kubeconfig(server, CertPath("", pki.ClusterCA), "kubelet-bootstrap", "token: "+token)
}

// FabricManagerUnit is NVIDIA's fabric manager, which the GPU image installs: on NVSwitch sizes no
// CUDA program runs until it has brought the NVSwitch fabric up.
const FabricManagerUnit = "nvidia-fabricmanager.service"

// fabricManagerDropIn starts the fabric manager with the kubelet, before it, on NVSwitch sizes.
var fabricManagerDropIn = `[Unit]
Wants=` + FabricManagerUnit + `
After=` + FabricManagerUnit + `
`

// KubeletClientCert is the kubelet's client certificate, which clusterforge-node-join writes and
// renews: once it is there the join token has done its work.
const KubeletClientCert = KubeletDir + "/pki/kubelet-client-current.pem"

// BootstrapCopies are the files that hold the join token on a worker besides
// KubeletBootstrapKubeconfig, as shell globs: cloud-init's copies of the user-data and the
// cloud-config it made of them (newer releases also under /run), its cached datasource, and the
// provisioning copies of the custom data (ovf-env.xml, which cloud-init reads again on reboots;
// without it Debian 12's cloud-init asks the metadata service, which has no custom data).
var BootstrapCopies = []string{
	"/var/lib/cloud/instances/*/user-data.txt*", "/var/lib/cloud/instances/*/cloud-config.txt", "/var/lib/cloud/instances/*/obj.pkl",
	"/run/cloud-init/combined-cloud-config.json", "/var/lib/waagent/CustomData", "/var/lib/waagent/ovf-env.xml",
}

// forgetBootstrapUnit removes the join token from the worker once the kubelet holds its client
// certificate: root on a worker can then pose as that node only, not join as any other. Only a
// reimage brings the token back, and then this runs again. A path unit starts it, so the wait
// delays no boot target; the service stays active once done, or the path would start it again.
const forgetBootstrapUnit = "clusterforge-forget-bootstrap"

func forgetBootstrap() part {
	script := `#!/bin/sh
# Removes the join token once the kubelet holds its client certificate and kubeconfig.
set -eu
for _ in $(seq 60); do
  [ -s ` + ShellQuote(KubeletKubeconfig) + ` ] && break
  sleep 1
done
[ -s ` + ShellQuote(KubeletKubeconfig) + ` ] || { echo "no kubeconfig for the kubelet yet: the join token stays" >&2; exit 1; }
rm -f ` + ShellQuote(KubeletBootstrapKubeconfig) + ` ` + strings.Join(BootstrapCopies, " ") + `
echo "join token removed"
`
	path := LibexecDir + "/forget-bootstrap"
	return part{
		files: []File{{Path: path, Content: script, Mode: 0o755}},
		units: []Unit{
			{Name: forgetBootstrapUnit + ".path", Enable: true, Content: `[Unit]
Description=clusterforge: remove the join token once the kubelet holds its certificate

[Path]
PathExists=` + KubeletClientCert + `

[Install]
WantedBy=multi-user.target
`},
			{Name: forgetBootstrapUnit + ".service", Content: `[Unit]
Description=clusterforge: remove the join token
After=cloud-init.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=` + ExecArg(path) + `
`},
		},
	}
}

func kubelet(c *spec.Cluster, b pki.Bundle, pool spec.Pool) part {
	files := []File{
		{Path: CertPath("", pki.ClusterCA), Content: b.Pair(pki.ClusterCA).CertPEM, Mode: certMode},
		{Path: KubeletConfigPath, Content: KubeletConfig(c, pool), Mode: 0o644},
		{Path: KubeletBootstrapKubeconfig, Content: BootstrapKubeconfig(c.APIServerURL(), pki.JoinToken(b.JoinSeed, pool.Name)), Mode: 0o600},
	}
	if size, _ := spec.VMCapacity(pool.VMSize); size.NVSwitch {
		files = append(files, File{Path: UnitDir + "/" + KubeletUnit + ".d/20-fabricmanager.conf", Content: fabricManagerDropIn, Mode: unitMode})
	}
	jitter, forget := joinJitter(c.Joins.JitterSeconds()), forgetBootstrap()
	return part{
		files: append(append(files, jitter.files...), forget.files...),
		units: append(forget.units, jitter.units[0], nodeJoin(), nodeRenew(), service{
			name: strings.TrimSuffix(KubeletUnit, ".service"), description: "Kubernetes node agent (pool " + pool.Name + ")",
			after: []string{identityUnit, ContainerdUnit, nodeJoinUnit}, requires: []string{identityUnit, nodeJoinUnit},
			binary: BinDir + "/kubelet", flags: KubeletFlags(pool), envFiles: []string{NodeEnvFile},
		}.unit()),
	}
}

// KubeletUnit is the kubelet's unit, which drop-ins, other units' ordering and the drills name.
const KubeletUnit = "kubelet.service"

// nodeJoinUnit gets the kubelet its client certificate before its first start, proving which
// Azure instance this is with the instance's attested document (components/nodejoin), after the
// join jitter, so a pool's step spreads its requests too. It retries on its own until it has one.
const nodeJoinUnit = "clusterforge-node-join.service"

func nodeJoin() Unit {
	return service{
		name: strings.TrimSuffix(nodeJoinUnit, ".service"), description: "clusterforge: prove this instance and get the kubelet's client certificate",
		after: []string{identityUnit, joinJitterUnit}, requires: []string{identityUnit, joinJitterUnit}, oneshot: true,
		binary: BinDir + "/clusterforge-node-join", envFiles: []string{NodeEnvFile},
		flags: nodeJoinFlags(Flags{"bootstrap-kubeconfig": KubeletBootstrapKubeconfig}),
	}.unit()
}

// nodeJoinFlags are clusterforge-node-join's flags for this machine, with extra.
func nodeJoinFlags(extra Flags) Flags {
	flags := Flags{"node-name": "${NODE_NAME}", "provider-id": "${PROVIDER_ID}", "metadata-endpoint": "http://" + wellknown.IMDSAddress,
		"kubeconfig": KubeletKubeconfig, "client-cert": KubeletClientCert}
	maps.Copy(flags, extra)
	return flags
}

// nodeRenewUnit renews the kubelet's client certificate whenever half of its short life
// (pki.NodeClientLifetime) is left, with a fresh attested document, as the node: a certificate
// copied off the machine, or one of an instance that is gone, dies within that life.
const nodeRenewUnit = "clusterforge-node-renew.service"

func nodeRenew() Unit {
	return service{
		name: strings.TrimSuffix(nodeRenewUnit, ".service"), description: "clusterforge: renew the kubelet's client certificate, proving this instance again",
		after: []string{identityUnit, nodeJoinUnit}, requires: []string{identityUnit, nodeJoinUnit},
		binary: BinDir + "/clusterforge-node-join", envFiles: []string{NodeEnvFile},
		// A refused renewal asks again later: the certificate lasts half its life meanwhile.
		flags: nodeJoinFlags(Flags{"renew": "true", "retry": "5m"}),
	}.unit()
}

// joinJitterUnit delays the kubelet's first start of each boot by a random 0 to Joins.Jitter
// seconds: a pool's new step, or a fleet rebooted at once, registers over that span instead of in
// the same second (L11). Restarts of the kubelet itself are not delayed.
const joinJitterUnit = "clusterforge-join-jitter.service"

func joinJitter(seconds int) part {
	script := fmt.Sprintf(`#!/bin/sh
# Sleeps a random 0 to %d seconds before the kubelet's first start this boot (L11).
set -eu
n=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
sleep $((n %% %d))
`, seconds, seconds+1)
	path := LibexecDir + "/join-jitter"
	return part{
		files: []File{{Path: path, Content: script, Mode: 0o755}},
		units: []Unit{bootStep(joinJitterUnit, "spread kubelet registrations over a random delay", "Requires="+identityUnit+"\nAfter="+identityUnit, path)},
	}
}
