package machines

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/clusterforge/clusterforge/components/azurerbac"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/standin/arm"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// AzureGatewayMAC is the MAC a VNet's gateway answers ARP with, the same in every Azure VNet; the
// booted hub's bridges answer with it too.
const AzureGatewayMAC = "12:34:56:78:9a:bc"

// Where the booted hub's stand-ins of Azure's public services listen: documentation addresses
// (RFC 5737), since nothing leaves the hub and Azure DNS's stand-in gives them their names.
const (
	EntraStandinAddress = "192.0.2.10"
	ARMStandinAddress   = "192.0.2.20"
)

// The systemd drop-ins the booted machines get, named in the deviations they make.
const (
	KubeletHostDropIn = "50-rehearsal-host.conf"
	StoreDropIn       = "50-rehearsal-store.conf"
)

// Deviation is one way the rehearsals differ from what Azure runs. Every difference is listed
// here, with what each rehearsal does: the process rehearsal (`make rehearse`, the units' commands
// as processes on loopback) and the booted machines (`make boot`, each machine a systemd-nspawn
// container booted from its image). `rehearse deviations` and both commands print the list.
type Deviation struct {
	Topic string
	Azure string
	// Process is what the process rehearsal does instead; "" when it does what Azure does.
	Process string
	// Boot is what the booted machines do instead; "" when they do what Azure does.
	Boot string
}

// Deviations lists every difference from Azure.
var Deviations = []Deviation{
	{"addresses", "control-plane and etcd subnets of the spoke VNet; apiserver VMs get addresses from Azure",
		"the control-plane subnet maps to 127.<base>.1.0/24 and the etcd subnet to 127.<base>.2.0/24, keeping each address's offset; apiserver i is .20+i; KWOK's pods take the first worker VNet's addresses, whatever their pool, and its nodes name their pool's first worker VNet's from .4 on, which route nowhere",
		"the planned subnets and etcd addresses; apiserver i is .20+i of the control-plane subnet and workers take their worker VNet's addresses from .4 on (Azure's DHCP picks those)"},
	{"network", "each VNet routes between its subnets and peering joins the cluster's VNets; Azure's DHCP configures each NIC; the internal load balancer's frontend is an address of the control-plane subnet",
		"every machine on this host's loopback",
		"network namespaces the boot makes: a hub (cfboot-<env>) with a bridge for each of the cluster's VNets, holding its subnets' gateways (.1), the control plane's also the load balancer frontend, 169.254.169.254, Azure DNS's " + machine.WireserverAddress + " and the addresses the stand-ins of Azure's public services listen on (" + EntraStandinAddress + ", " + ARMStandinAddress + "), and one namespace per machine on an isolated port of its VNet's bridge, eth0 (MAC 00:0d:3a:…) configured and /etc/resolv.conf naming Azure DNS written before the machine starts; the hub answers every ARP request from the fixed MAC Azure's gateways answer with (" + AzureGatewayMAC + ") and routes every packet, pod IPs to their worker, between every two VNets as their peering would (a test cuts one with a prohibit rule); no route leaves the hub (this process's clients dial from inside it, and this host reaches the load balancer only through a loopback forwarder, `rehearse forward`, named by build/boot/<env>/kubeconfig-host); the wireserver (168.63.129.16) has no stand-in but its DNS (see Azure DNS)"},
	{"load balancer", fmt.Sprintf("the internal load balancer (Standard) spreads new flows over the apiservers its HTTPS probe of %s holds healthy (every %d s, out after %d failures in a row, back after 1 success), by a hash of each flow's addresses and ports;", spec.APIServerProbePath, spec.APIServerProbeIntervalSeconds, spec.APIServerProbeFailures) + " a new flow sent to an apiserver that stopped listening before the probe saw it fails; established flows go on; with no healthy apiserver new flows are dropped",
		"`rehearse lb` on the control plane's load balancer address: a TCP proxy with the same probe that spreads new connections in rotation rather than by hash; a connection sent to a backend that does not answer is reset, never retried on another; the backends' health goes to build/rehearse/<env>/lb.json",
		"the same proxy in the hub on the load balancer's frontend address, the backends' health in build/boot/<env>/lb.json"},
	{"CPUs and memory", "each VM has its size's cores and memory to itself",
		"KWOK's nodes report their VM size's capacity, and as allocatable what the kubelet's reservation leaves of its CPU and memory (ephemeral storage: allocatable equals capacity, without the 10 % a kubelet's nodefs eviction threshold keeps back); the control plane's processes share this host's cores and memory",
		"every machine shares this host's cores and memory with no limit of its own: a worker's kubelet reports this host's as its capacity whatever its pool's VM size, and one machine's load slows the others"},
	{"localhost", "each VM has its own 127.0.0.1 and binds 0.0.0.0",
		"all machines share one loopback, so a machine's 127.0.0.1 and 0.0.0.0 (flags and kubeconfigs) become its own address", ""},
	{"pki", "certificates from the Pulumi TLS provider, in state",
		"a set from the same profiles, kept in build/rehearse/<env>/identity.json until `rehearse clean`; the apiserver certificate also names each apiserver's address (its mapped 127.0.0.1)",
		"the set `make plan` issued from the same profiles into the user-data, kept in build/plan/<env>.pki.json as state keeps it"},
	{"instance metadata", "the instance metadata service at 169.254.169.254 answers each VM about itself; clusterforge-identity.service reads NODE_NAME, NODE_IP and PROVIDER_ID from it; a joining worker asks it for its attested document (signed by Azure under a public root); the apiserver machines' CSR approver gets its identity's token from it",
		"the rehearsal writes the same node.env, with resource ids as the booted stand-in gives them; the unit is not run; no worker joins (KWOK's nodes are made by the rehearsal)",
		"a stand-in on 169.254.169.254 in the hub (`rehearse imds`) answers each machine, told apart by its source address, with its name, resource id, vmId, zone, location, size and NIC address (from a file it reads again when a scale set's growth or deletion changes it), and with the scheduled events a drill writes (a machine's start of one of its events marks it Started, nothing reboots); it signs attested documents as Azure shapes them (PKCS#7, the signer's certificate for metadata.azure.com alone, its issuer served at the address the certificate names, on www.microsoft.com as Azure's, which Azure DNS's stand-in resolves to this one) under a root made at boot, which the CSR approver trusts through SSL_CERT_FILE in a drop-in, and issues the apiserver machines' identity's tokens signed with Entra's stand-in's key"},
	{"Azure DNS", "every VM's DHCP names Azure DNS (" + machine.WireserverAddress + "), which resolves public names, Azure's services' among them; CoreDNS forwards to it",
		"every process resolves with this host's resolver; the stand-ins are named by their loopback addresses",
		"a stand-in on " + machine.WireserverAddress + " in the hub, UDP and TCP port 53 (`rehearse azure-dns`), answers the public names of the services the cluster calls (login.microsoftonline.com, management.azure.com, www.microsoft.com) with their stand-ins' addresses, nothing for IPv6, and no such name for every other name, since nothing leaves the hub; the boot writes each machine's /etc/resolv.conf naming it as Azure's DHCP would (no search domain: it resolves no VM names); this process's clients resolve through it too"},
	{"Entra ID", "the control loops that call Azure (cluster-autoscaler, clusterforge-ops) trade their service accounts' tokens at Entra ID (login.microsoftonline.com) for Azure tokens; Entra reads the issuer's keys from the public storage container the Pulumi program writes them to",
		"add-on pods are KWOK pods, so nothing signs in on its own; the issuer check trades the real apiservers' tokens at the same stand-in, served from the test process",
		"a stand-in in the hub on " + EntraStandinAddress + ", port 443 (`rehearse entra`), which Azure DNS's stand-in names login.microsoftonline.com, with its own self-signed certificate for that name and management.azure.com, which the pods with an Azure identity trust through SSL_CERT_FILE (a ConfigMap); it answers MSAL's instance discovery as Entra does (its own host known, any other refused with AADSTS50049), the tenant's OpenID configuration and both token endpoints (v2's scope, v1's resource); it checks each assertion as Entra does (RS256 only, the issuer's published key, issuer, subject and audience of a federated credential, lifetime) against the federated credentials the Pulumi program creates, with the rehearsal's client and tenant ids, and reads the issuer's documents from build/boot/<env>/entra/issuer/, a copy of the public container; it signs the access tokens it issues (RS256, a key made at boot, build/boot/<env>/entra/token-key.pem) for Resource Manager's stand-in to verify"},
	{"Resource Manager", "cluster-autoscaler and clusterforge-ops call Resource Manager (management.azure.com) and its Compute provider on the worker scale sets with their workload identities' tokens, and the CSR approver with the apiserver machines' identity, authorized by the role assignments the Pulumi program makes; they read the cloud's endpoints from the environment file (AzurePublicCloud; the approver's public cloud without one)",
		"add-on pods are KWOK pods, so nothing calls it, and KWOK's nodes name no instance, so the CSR approver refuses their serving certificates without asking it; the stand-in's own tests drive it with the Azure SDK's clients, remediation's and the approver's code, and forge's read of gallery image versions' tags (any resource group of its one subscription)",
		"a stand-in in the hub on " + ARMStandinAddress + ", port 443, with Entra ID's stand-in's certificate (`rehearse arm`), which Azure DNS's stand-in names management.azure.com, so the workloads' environment file names the public cloud as on Azure; it holds the booted machines as scale-set instances (each with one network interface, whose primary IP configuration is the machine's address: no pod addresses), every other scale set the program makes with no instance (an empty pool's, tagged as the program tags it) and the etcd members as VMs, answers in Resource Manager's wire protocol (and its anonymous cloud discovery, /metadata/endpoints, which cluster-autoscaler reads before it signs in to a custom cloud) with long-running operations (Azure-AsyncOperation and Location polling) that take this project's planning latencies, throttles with Compute's documented token buckets and Resource Manager's (429, Retry-After, x-ms-ratelimit-remaining-*), takes only Entra's stand-in's tokens for its audience and tenant, and authorizes each request against the role assignments (azurerbac.Grants) of the workloads and the apiserver machines with the rehearsal's client ids; it authorizes before it looks, as Azure does (403 for what the caller may not read or write, whether or not it exists); reading an operation's status needs Microsoft.Compute/locations/operations/read at the resource group (as Azure documents) and to be the caller that started it; its time runs ten times faster than real time (latencies, windows, grace periods); through the process that booted the machines, over build/boot/<env>/arm/machines.sock, while that process runs (the test run, or `make boot HOLD=1`; after a plain `make boot` exits these fail): a worker scale set's growth boots a machine for each new instance (named, with the vmId and zone the stand-in gave the instance, past the highest address its VNet's machines hold, followed by its pool's pod IPs, from its pool's user-data), which joins as a VM does, and the stand-in's NIC then holds that address; a deleted worker instance's machine is removed with its disks and network; a reimage of an apiserver or worker instance reimages its machine (new disks, a new boot); etcd members are neither reimaged nor deleted, nor apiserver instances created or deleted; its requests go to build/boot/<env>/arm/calls.jsonl"},
	{"automatic repairs", "the apiserver scale set's automatic instance repairs reimage an instance whose Application Health extension finds its apiserver dead (HTTPS to its own /livez without the etcd checks, on the VM) once its grace period (" + spec.APIServerRepairGracePeriod + ") has passed since its last change, one at a time under 20 instances and 5 % at once above, and suspend themselves when repaired instances stay unhealthy",
		"not modelled: the rehearsal's apiservers are processes, which nothing repairs",
		fmt.Sprintf("Resource Manager's stand-in judges the apiserver instances by probing each as its extension does, from the hub rather than the machine itself, once each time it judges (every %s of its clock) instead of every %d s, the grace period on its faster clock; an instance in any operation counts against the limit; the service suspends itself after %d failed repairs in a row (Azure says only \"repeated\"); it starts suspended, since the boot itself does not run faster, and the drill resumes it with the Azure SDK as the operator, whom the stand-in grants Virtual Machine Contributor over the resource group", arm.RepairEvery, spec.APIServerProbeIntervalSeconds, arm.RepairsBeforeSuspend)},
	{"cloud-init datasource", "cloud-init's Azure datasource: customData, the VM's name, DHCP networking",
		"no cloud-init: the rehearsal writes the rendered files under the machine's root",
		"the NoCloud datasource: /var/lib/cloud/seed/nocloud holds the plan's user-data byte for byte, instance-id and local-hostname the machine's name, and network config disabled (eth0 is already set); the seed keeps the join token after clusterforge-forget-bootstrap removes cloud-init's copies"},
	{"OS disk", "each VM's OS disk is a copy of its gallery image",
		"every absolute path (files, flags, scripts) is placed under build/rehearse/<env>/machines/<machine>/; binaries are links to .tools/bin",
		"the baked image unpacked once per role into build/boot/<env>/images/, under an overlay per machine whose upper layer is the machine's own; its free space is this host's, so a drop-in (" + KubeletHostDropIn + ") removes the workers' nodefs eviction thresholds from the kubelet's config before each start (a full host disk would evict every pod)"},
	{"local disk", "the local temp/NVMe disk is /dev/disk/azure/resource or /dev/disk/azure/local/by-index/1, named by udev; etcd-disk.service and containerd-disk.service format and mount it",
		"etcd's data dir is a plain directory under the machine root; etcd-disk.service is not run; the capacity topology (the scale benchmark's and the total-loss recovery benchmark's) mounts each member's data dir from a disk stand-in of its own instead (FUSE over tmpfs, every flush taking a stated latency), whose data goes with `rehearse down`",
		"a loop device over a sparse 8 GiB file; the boot binds a directory holding its node at /dev/disk/azure (udev does not run in a container); the disk units run as rendered"},
	{"no image", "every machine boots a gallery image version baked for its stack; clusterforge-image-check.service compares the image's manifest with the releases the user-data was rendered for, and every clusterforge service waits for it",
		"no image: the processes are this host's builds of the pinned releases, and clusterforge-image-check.service is not run",
		"the images `make images-local` baked for the stack: the check runs as rendered"},
	{"preloaded images", "a worker image preloads the upstream pause image, pulled during its bake and checked against the digest versions.yaml pins, and the add-on images built from the pinned sources (`make image-publish`)",
		"KWOK's nodes run no containers: nothing is preloaded",
		"the local bake reaches no registry: its pause image is our own static binary under the upstream name (another digest), and it also preloads the test environment's 64 MiB app image (images/testenv/testapp), which a published image never carries"},
	{"backup store", "a storage account reached through a private endpoint, and the birth registry's account in its own locked resource group, births immutable; the agent authenticates with the etcd VM's managed identity",
		"Azurite (Microsoft's emulator, pinned) on 127.0.0.1:10000+<base> with its development account, the backups, births and retirements as three containers of one account, with no lock or immutability policy (the Pulumi program's are tested on the mock engine); the etcd-main machines get AZURE_STORAGE_CONNECTION_STRING, which the agent prefers to the managed identity; its data in build/rehearse/<env>/store outlives `rehearse down` and goes with `rehearse clean`",
		"Azurite in the hub on the etcd subnet's gateway address, port 10000; a systemd drop-in (" + StoreDropIn + ") gives the etcd-main agent and etcd-join AZURE_STORAGE_CONNECTION_STRING; its data goes with `make boot-down`"},
	{"machine stop", "stopping a VM keeps its local disk; deallocating, resizing or redeploying it wipes the disk",
		"`rehearse down` stops every process and keeps the etcd data dirs and the PKI (identity.json, as Pulumi state keeps it), so the next `rehearse up` of the same stack is the same cluster; drills wipe a data dir to stand for a deallocation; `rehearse clean` deletes everything",
		"a drill's crash kills the machine's PID namespace, a clean stop halts its systemd; both keep its disks; a wipe gives it a new empty local disk; `make boot-down` deletes the machines, their disks and the store (the unpacked images stay)"},
	{"endpoint reconciler", "--endpoint-reconciler-type=lease publishes each apiserver in the kubernetes Endpoints",
		"--endpoint-reconciler-type=none: Endpoints may not hold loopback addresses", ""},
	{"systemd", "systemd runs the units: Restart=always or on-failure, LimitNOFILE, one host name per VM",
		"the rehearsal runs the units' ExecStart in unit order; oneshots retry every RestartSec; a stopped service stays stopped until a drill restarts it; all processes share this host's name and limits",
		""},
	{"machine cgroups", "systemd finds the cgroup controllers writable and delegates them to containerd and the kubelet",
		"", "systemd-nspawn mounts cgroup v1 controllers read-only, so the machine's PID 1 is a boot script that remounts them writable and execs systemd; each machine's cgroups are its own subtree (cfboot-<env>/<machine>) of this process's"},
	{"cgroup v2", "Azure's images boot with the unified cgroup hierarchy (v2); the kubelet refuses to start on a cgroup v1 host (failCgroupV1: true, its default since Kubernetes 1.35)",
		"", "the machines share this host's cgroup v1 hierarchy, so a drop-in (" + KubeletHostDropIn + ") sets the workers' failCgroupV1 to false before each kubelet start; containerd and runc run on cgroup v1, which both still support"},
	{"kernel", "each VM has its own kernel: the image's sysctls are applied at boot",
		"the processes run on this host's kernel",
		"the machines share this host's kernel: /proc/sys is read-only in them, so systemd-sysctl leaves the image's sysctls unapplied, except the net.* ones each machine's own network namespace holds, which the boot script applies before systemd starts (with /proc/sys/net writable, as systemd-nspawn leaves it for a private network); the settings the kubelet's protectKernelDefaults checks (vm.overcommit_memory 1, vm.panic_on_oom 0, kernel.panic 10, kernel.panic_on_oops 1, kernel.keys.root_max*) are not namespaced, so the boot sets them on this host as the image does (the kubelet's own defaults, which it sets on any host it runs on) and logs what it changed; the image's inotify limits (fs.inotify.max_user_instances 8192, max_user_watches 1048576) count for all machines together, which run as this host's root, so the boot raises this host's to at least those; /dev/kmsg is bound read-only for the kubelet (with CAP_SYSLOG), and node-problem-detector reads each worker's /var/log/clusterforge-kernel.log instead (its filelog watcher, the same rules), which the drills write, since a line in the shared kernel log would be every worker's; keyring system calls are allowed for runc; this host grants no CAP_SYS_RESOURCE, so the workers' containerd config gets restrict_oom_score_adj = true"},
	{"workers", "VMSS instances running kubelet and containerd",
		"KWOK nodes with the pools' labels, taints and VM capacity, at most --nodes-per-pool per pool (GPU nodes without the preflight taint, as if their tests had passed: no agent runs on a KWOK node; the preflight drill gives its own nodes the taint); KWOK acts for every node as one user in system:nodes (clusterforge:kwok), so priority and fairness classes its heartbeats and leases as kubelets', and RBAC grants it what the Node authorizer grants each kubelet for its own node; each node renews its 40 s lease every 10 s and reports status every 5 minutes, a kubelet's defaults, and is registered with a kubelet's status (addresses, system info, 50 images), but KWOK's one process watches every node and lease where each kubelet watches its own",
		"each pool's `nodes` instances booted from the worker image: its containerd and kubelet, the attested join through the load balancer"},
	{"roll", "make roll replaces an etcd member's VM by a targeted Pulumi update and reimages a scale-set instance on its latest model, through Azure's APIs",
		"the supervisor replaces a machine by stopping its processes, emptying its etcd data dir and starting it from the desired rendering with the desired versions' binaries (.tools/versions/); a worker is its KWOK node registered again with the new kubelet version and still cordoned (a reimaged VM keeps its Node object), no kubelet binary runs",
		"the roll drill's kubelet part (TestKubeletUpgradeRoll; make roll itself acts on the process rehearsal or Azure): a replaced machine is shut down by its systemd, gets a new OS disk (its image under an empty overlay) and local disk, and boots the image again from the desired plan's user-data; the image is the one the boot unpacked, and the workers' kubelet is swapped for the previous one in place and restarted, not booted from an image baked at that version; etcd members are refused (their roll is drilled on the process rehearsal)"},
	{"pod IPs", "azure-vnet-ipam asks the wireserver (168.63.129.16) for the NIC's secondary IP configurations, which the scale set gives every NIC (maxPods of them)",
		"no pod runs: KWOK nodes",
		"azure-vnet and azure-vnet-ipam run as baked, but the boot writes each worker a conflist whose IPAM environment is the plugin's own file source (fileIpam) and /etc/kubernetes/interfaces.json listing its NIC (MAC, subnet, primary and secondary addresses); the hub routes each secondary address to its worker, as the VNet does"},
	{"add-ons", "the cluster services' Pulumi program (project clusterforge-services) registers every add-on object through pulumi-kubernetes, after the infrastructure's `pulumi up`; cluster-autoscaler's cloud config and the workloads' identity ConfigMaps name the subscription, the tenant and each workload's identity",
		"the same objects, server-side applied: the foundation (join RBAC and token) as soon as the API answers (as `pulumi up` applies them first among the add-ons), the rest by `rehearse up` and the checks; the cloud config names placeholder ids; add-on pods are KWOK pods, so nothing in them runs; the operations layer's webhook configurations are left out (their backend would be a KWOK pod, and the roll drill deletes and re-registers KWOK nodes where Azure reimages a VM in place, which the scale-down brake would count as removals): the brake and team drills register them against handlers served from the test process",
		"the foundation (join RBAC and token) server-side applied once the API answers, so the workers join before the add-ons are applied; once they are Ready, `pulumi up` of the cluster services stack applies every add-on, the foundation included (see Pulumi), with the boot's changes below carried as strategic-merge patches in the infrastructure's handoff; their pods run for real from the images the worker image preloads, except cluster-autoscaler, applied at zero replicas (its image is not built here); clusterforge-ops signs in at Entra ID's stand-in; clusterforge-ops serves its webhooks to the booted apiservers, which reach its pods' addresses through aggregator routing as on Azure, and its agents read the metadata stand-in, whose scheduled events the drills write; every add-on container's CPU request and limit is scaled by this host's CPUs over the smallest worker size's (the machines share this host's CPUs)"},
	{"Pulumi", "`pulumi up` of the infrastructure (project clusterforge) creates the Azure resources and exports the handoff (output clusterServices); `pulumi up` of the cluster services (project clusterforge-services) reads it through a stack reference; both run on the user's backend (a blob container or Pulumi Cloud) with plugins from Pulumi's registry: the Go language host of the CLI's release and pulumi-kubernetes at the SDK's release",
		"the infrastructure program runs on Pulumi's mock engine only (`make plan`): the Azure half cannot run here",
		"the engine built here (scripts/toolchain.sh pulumi): the CLI at the SDK's release; the Go language host of SDK " + spec.Pinned["pulumiLanguageGo"] + ", the last release that held it (later ones moved it to a module the proxy refuses); pulumi-kubernetes built from the one source the proxy serves, an untagged commit after the release its own SDK requirement names, installed as the plugin release the SDK asks for; a file backend and a passphrase secrets provider under build/boot/<env>/pulumi, no login, no network; the infrastructure stack is a stand-in of its project and name, run through the Automation API with an inline program whose only output is the handoff of the booted machines (this host's forwarded kubeconfig, the rehearsal's identities in the stand-ins' cloud, the plan's PKI and join token); the services project runs from a copy of services/Pulumi.yaml under that directory whose stack file is the booted spec (the encryption salt stays out of stacks/)"},
}

// Placeholder Azure ids of the rehearsals' deploy-time values (deviation "add-ons").
const (
	RehearsalSubscriptionID = "00000000-0000-0000-0000-000000000000"
	RehearsalTenantID       = "22222222-2222-2222-2222-222222222222"
	// RehearsalOperatorID is the operator's own sign-in (az login), which the booted Resource
	// Manager grants Virtual Machine Contributor over the resource group: the runbooks' commands.
	RehearsalOperatorID = "11111111-1111-1111-1111-0000000000ff"
)

// armPrincipals are the identities that call Resource Manager: the workloads', and the apiserver
// machines' (their CSR approver reads joining instances).
var armPrincipals = append(slices.Clone(addons.AzureWorkloads), spec.RoleAPIServer)

// RehearsalClientIDs are the rehearsals' placeholder client ids of those identities, by workload
// or machine role: its index in armPrincipals.
func RehearsalClientIDs() map[string]string {
	ids := map[string]string{}
	for i, w := range armPrincipals {
		ids[w] = fmt.Sprintf("11111111-1111-1111-1111-%012d", i+1)
	}
	return ids
}

// RehearsalAzure are the rehearsals' deploy-time Azure values: placeholder ids, and the cloud.
func RehearsalAzure(cloud azurecloud.Cloud) addons.Azure {
	return addons.Azure{SubscriptionID: RehearsalSubscriptionID, TenantID: RehearsalTenantID, Cloud: cloud, ClientIDs: RehearsalClientIDs()}
}

// RehearsalAssignments are the role assignments the Pulumi program makes for the identities that
// call Resource Manager (azurerbac.Grants), with the rehearsals' client ids, over the scopes its
// stand-in serves: the resource group and the worker scale sets.
func RehearsalAssignments(c *spec.Cluster) []arm.Assignment {
	group := RehearsalGroupID(c)
	scopes := map[string][]string{azurerbac.ScopeResourceGroup: {group},
		azurerbac.ScopeAPIServerScaleSet: {group + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + c.APIServerName()}}
	for _, s := range c.ScaleSets() {
		scopes[azurerbac.ScopeWorkerScaleSets] = append(scopes[azurerbac.ScopeWorkerScaleSets], group+"/providers/Microsoft.Compute/virtualMachineScaleSets/"+s.AzureName)
	}
	var out []arm.Assignment
	for _, w := range armPrincipals {
		for _, g := range azurerbac.Grants(w) {
			actions, ok := azurerbac.CustomRoleActions[g.Role]
			if !ok {
				actions = azurerbac.BuiltInRoleActions[g.Role]
			}
			for _, scope := range scopes[g.Scope] {
				if len(actions) > 0 {
					out = append(out, arm.Assignment{Principal: RehearsalClientIDs()[w], Scope: scope, Actions: actions})
				}
			}
		}
	}
	return out
}

// RehearsalFederations are the federated credentials the Pulumi program creates for c, with the
// rehearsals' client ids: what Entra ID's stand-in trusts.
func RehearsalFederations(c *spec.Cluster) []entra.Federation {
	var out []entra.Federation
	for _, w := range addons.AzureWorkloads {
		f := addons.FederationOf(c, w)
		out = append(out, entra.Federation{ClientID: RehearsalClientIDs()[w], Issuer: f.Issuer, Subject: f.Subject, Audience: f.Audience})
	}
	return out
}

// AllAddons are every add-on object with the rehearsal's deploy-time Azure values (the cloud
// its workloads call) and, as the infrastructure hands them over, the ops webhooks' serving pair and
// the authority their clients trust.
func (p *Layout) AllAddons(cloud azurecloud.Cloud) ([]addons.Object, error) {
	return addons.Deploy(p.Cluster, p.Deployed(cloud))
}

// Deployed are the deploy-time values of the rehearsal's add-ons, as the infrastructure stack
// hands them over on Azure: the rehearsal's identities in cloud, its PKI and join token.
func (p *Layout) Deployed(cloud azurecloud.Cloud) addons.Deployed {
	ops := p.Bundle.Pair(pki.OpsWebhook)
	return addons.Deployed{Azure: RehearsalAzure(cloud), WebhookServingCA: p.Bundle.Pair(pki.WebhookServingCA).CertPEM,
		OpsWebhookCert: ops.CertPEM, OpsWebhookKey: ops.KeyPEM, WebhookClientCA: p.Bundle.Pair(pki.WebhookClientCA).CertPEM,
		JoinSeed: p.Bundle.JoinSeed, BootstrapTokenExpires: p.Bundle.BootstrapTokenExpires}
}

// APIServerMachineOffset is where apiserver machines start in the mapped control-plane subnet.
const APIServerMachineOffset = 20

// FormatDeviations renders the deviation list for people: for the process rehearsal when boot
// is false, for the booted machines when true; topics where that one does what Azure does are left out.
func FormatDeviations(boot bool) string {
	var b strings.Builder
	what := "rehearsal"
	if boot {
		what = "boot"
	}
	fmt.Fprintf(&b, "Deviations of the %s from Azure (test/machines/deviations.go):\n", what)
	for _, d := range Deviations {
		text := d.Process
		if boot {
			text = d.Boot
		}
		if text != "" {
			fmt.Fprintf(&b, "  - %s\n      Azure:     %s\n      %-10s %s\n", d.Topic, d.Azure, what+":", text)
		}
	}
	return b.String()
}

// markdownDeviations is Deviations as the table docs/reference/rehearsal-deviations.md shows
// between its deviations markers (a test keeps the page in step).
func markdownDeviations() string {
	cell := strings.NewReplacer("|", "\\|", "<", "&lt;", ">", "&gt;")
	or := func(s string) string {
		if s == "" {
			return "as Azure"
		}
		return cell.Replace(s)
	}
	var b strings.Builder
	b.WriteString("| topic | on Azure | process rehearsal | booted machines |\n|---|---|---|---|\n")
	for _, d := range Deviations {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell.Replace(d.Topic), cell.Replace(d.Azure), or(d.Process), or(d.Boot))
	}
	return b.String()
}

// RehearsalGroupID is the resource ID of the cluster's resource group in the rehearsal's subscription.
func RehearsalGroupID(c *spec.Cluster) string {
	return "/subscriptions/" + RehearsalSubscriptionID + "/resourceGroups/" + c.ResourceGroup()
}

// ResourceID is the resource ID the metadata stand-in gives a rehearsal machine: a scale-set
// instance's for the apiservers and workers, their names being the scale set's computer name
// prefix and six base-36 digits of the instance id, as Azure names them; a VM's for etcd members.
func ResourceID(c *spec.Cluster, role, name string) string {
	group := RehearsalGroupID(c) + "/providers/Microsoft.Compute/"
	if role != spec.RoleAPIServer && machine.ImageOf(role) != machine.ImageWorker || len(name) < 6 {
		return group + "virtualMachines/" + name
	}
	prefix := strings.TrimRight(name[:len(name)-6], "-")
	instance, _ := strconv.ParseInt(name[len(name)-6:], 36, 64)
	return fmt.Sprintf("%svirtualMachineScaleSets/%s/virtualMachines/%d", group, prefix, instance)
}

// VMID is a rehearsal machine's Azure vmId: fixed by its name, so a reboot keeps it.
func VMID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}
