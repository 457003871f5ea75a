package machine

import "encoding/json"

// azure-npm enforces NetworkPolicies on every worker, in the forward path of its pods' veths
// (iptables through nft, and ipsets of pod IPs): Azure's own policy engine for Azure CNI, from the
// same pinned release as the CNI plugins. Like kube-proxy it is a unit beside the kubelet with the
// node's own client certificate (addons grants the nodes' group what it reads: pods, namespaces
// and NetworkPolicies), not a DaemonSet whose service-account token would sit on every node.
const (
	NetworkPolicyConfigPath = KubeDir + "/azure-npm.json"
	NetworkPolicyUnit       = "azure-npm"
	// NetworkPolicyMetricsPort serves azure-npm's metrics, on the node's loopback only.
	NetworkPolicyMetricsPort = 10091
)

// networkPolicyConfig is azure-npm's configuration. It reads the file over its defaults field by
// field with zero values, so every field is written. v2 (the dataplane upstream maintains);
// its chain first in FORWARD (kube-proxy's rules are nftables tables of their own, so there is no
// KUBE-SERVICES chain to follow); no pprof and no debug API; its metrics on loopback.
func networkPolicyConfig() string {
	type toggles struct {
		EnablePrometheusMetrics, EnablePprof, EnableHTTPDebugAPI, EnableV2NPM, PlaceAzureChainFirst,
		ApplyIPSetsOnNeed, ApplyInBackground, NetPolInBackground, EnableNPMLite bool
	}
	type transport struct {
		Address           string
		Port, ServicePort int
	}
	cfg := struct {
		ResyncPeriodInMinutes               int
		ListeningPort                       int
		ListeningAddress                    string
		Transport                           transport
		WindowsNetworkName                  string
		ApplyDataPlaneMaxBatches            int
		ApplyDataPlaneMaxWaitInMilliseconds int
		MaxBatchedACLsPerPod                int
		MaxPendingNetPols                   int
		NetPolInvervalInMilliseconds        int
		Toggles                             toggles
		LogLevel                            string
	}{
		ResyncPeriodInMinutes: 15, ListeningPort: NetworkPolicyMetricsPort, ListeningAddress: "127.0.0.1",
		// The gRPC transport serves only upstream's split control plane, which this does not run.
		Transport:          transport{Address: "127.0.0.1", Port: 10092, ServicePort: 9002},
		WindowsNetworkName: "azure", ApplyDataPlaneMaxBatches: 100, ApplyDataPlaneMaxWaitInMilliseconds: 500,
		MaxBatchedACLsPerPod: 30, MaxPendingNetPols: 100, NetPolInvervalInMilliseconds: 500,
		Toggles: toggles{EnablePrometheusMetrics: true, EnableV2NPM: true, PlaceAzureChainFirst: true,
			ApplyInBackground: true, NetPolInBackground: true},
		LogLevel: "info",
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		panic(err) // a fixed struct of plain fields
	}
	return string(out) + "\n"
}

// networkPolicy starts once the kubelet runs (its kubeconfig is written then, and the kubelet
// makes the KUBE-IPTABLES-HINT chain azure-npm reads to pick iptables' nft backend). azure-npm
// takes the node's name from HOSTNAME.
func networkPolicy() part {
	return part{
		files: []File{{Path: NetworkPolicyConfigPath, Content: networkPolicyConfig(), Mode: 0o644}},
		units: []Unit{service{
			name: NetworkPolicyUnit, description: "Azure Network Policy Manager (NetworkPolicies of the node's pods)",
			after: []string{identityUnit, KubeletUnit}, requires: []string{identityUnit}, binary: BinDir + "/azure-npm", subcommand: "start",
			environ: []string{"HOSTNAME=${NODE_NAME}", "NPM_CONFIG=" + NetworkPolicyConfigPath},
			flags:   Flags{"kubeconfig": KubeletKubeconfig}, envFiles: []string{NodeEnvFile},
		}.unit()},
	}
}
