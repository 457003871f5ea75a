package offline

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/clusterforge/clusterforge/components/azurerbac"

	"gopkg.in/yaml.v3"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/infra/azure"
	"github.com/clusterforge/clusterforge/infra/clusteraddons"
)

var update = flag.Bool("update", false, "rewrite the golden user-data files under testdata/")

var stacks = []string{"dev", "prod-2500", "prod-7500", "prod-10k"}

var (
	plansOnce sync.Once
	plans     map[string]*Result
	plansErr  error
)

// planAll runs each stack's plan once for the whole test binary.
func planAll(t testing.TB) map[string]*Result {
	plansOnce.Do(func() {
		plans = map[string]*Result{}
		for _, s := range stacks {
			r, err := Run(s, stackFile(s), nil)
			if err != nil {
				plansErr = err
				return
			}
			plans[s] = r
		}
	})
	if plansErr != nil {
		t.Fatal(plansErr)
	}
	return plans
}

func stackFile(stack string) string {
	return spec.StackFile(filepath.Join("..", "..", spec.StackDir), stack)
}

func byType(r *Result, typ string) []Resource {
	var out []Resource
	for _, res := range r.Resources {
		if res.Type == typ {
			out = append(out, res)
		}
	}
	return out
}

// only returns the one resource of a type, failing the test unless there is exactly one.
func only(t *testing.T, r *Result, typ string) Resource {
	t.Helper()
	all := byType(r, typ)
	if len(all) != 1 {
		t.Fatalf("%d resources of type %s, want 1", len(all), typ)
	}
	return all[0]
}

func field(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func role(res Resource) string {
	s, _ := field(res.Inputs, "tags", "clusterforge.io/role").(string)
	return s
}

func TestTopology(t *testing.T) {
	for stack, r := range planAll(t) {
		t.Run(stack, func(t *testing.T) {
			c := r.Cluster
			vms := map[string][]Resource{}
			for _, vm := range byType(r, "azure-native:compute:VirtualMachine") {
				vms[role(vm)] = append(vms[role(vm)], vm)
			}
			if n := len(vms[spec.RoleEtcdMain]); n != 5 {
				t.Errorf("etcd-main VMs = %d, want 5 (L01)", n)
			}
			if n := len(vms[spec.RoleEtcdEvents]); n != c.EtcdEvents.Members || n < 3 {
				t.Errorf("etcd-events VMs = %d, want a separate cluster of %d (L03)", n, c.EtcdEvents.Members)
			}
			zones := map[any]bool{}
			for _, vm := range vms[spec.RoleEtcdMain] {
				zones[field(vm.Inputs, "zones").([]any)[0]] = true
				if !spec.HasLocalDisk(field(vm.Inputs, "hardwareProfile", "vmSize").(string)) {
					t.Errorf("%s has no local disk (L02)", vm.Name)
				}
			}
			if len(zones) != 3 {
				t.Errorf("etcd-main spread over %d zones, want 3", len(zones))
			}
			for _, nic := range byType(r, "azure-native:network:NetworkInterface") {
				if field(nic.Inputs, "ipConfigurations").([]any)[0].(map[string]any)["privateIPAllocationMethod"] != "Static" {
					t.Errorf("%s: etcd member address is not static", nic.Name)
				}
			}

			sets := map[string][]Resource{}
			for _, s := range byType(r, "azure-native:compute:VirtualMachineScaleSet") {
				sets[role(s)] = append(sets[role(s)], s)
			}
			api := sets[spec.RoleAPIServer]
			if len(api) != 1 || field(api[0].Inputs, "sku", "capacity") != float64(c.APIServer.Count) {
				t.Fatalf("apiserver scale sets %v, want one of capacity %d", len(api), c.APIServer.Count)
			}
			if stack != "dev" && c.APIServer.Count != 5 {
				t.Errorf("%s runs %d apiservers, want 5 (L05)", stack, c.APIServer.Count)
			}
			pools := field(api[0].Inputs, "virtualMachineProfile", "networkProfile", "networkInterfaceConfigurations").([]any)[0].(map[string]any)["ipConfigurations"].([]any)[0].(map[string]any)["loadBalancerBackendAddressPools"]
			if pools == nil {
				t.Error("apiserver scale set is not behind the load balancer")
			}
			// Each VNet's NAT gateway holds its machines' peak egress: 64,512 ports a public IP.
			nats := byType(r, "azure-native:network:NatGateway")
			if len(nats) != 1+len(c.WorkerVNets()) {
				t.Errorf("%d NAT gateways, want one for each of %d VNets", len(nats), 1+len(c.WorkerVNets()))
			}
			for _, w := range c.WorkerVNets() {
				for _, nat := range nats {
					if strings.Contains(nat.Name, w.Name+"-nat") {
						ips := len(field(nat.Inputs, "publicIpAddresses").([]any))
						if ips > spec.MaxNATPublicIPs || int64(ips)*spec.SNATPortsPerPublicIP < int64(w.Nodes())*int64(c.EgressPortsPerNode()) {
							t.Errorf("%s: %d public IPs for %d nodes × %d ports", nat.Name, ips, w.Nodes(), c.EgressPortsPerNode())
						}
					}
				}
			}
			lbs := byType(r, "azure-native:network:LoadBalancer")
			if len(lbs) != 1 || field(lbs[0].Inputs, "probes").([]any)[0].(map[string]any)["requestPath"] != spec.APIServerProbePath {
				t.Errorf("want one internal load balancer probing %s", spec.APIServerProbePath)
			}
			// L05: Azure reimages an apiserver whose health extension finds it dead
			// (TestRepairsJudgeTheAPIServersOwnLiveness); workers are remediation's.
			if r := field(api[0].Inputs, "automaticRepairsPolicy"); field(api[0].Inputs, "automaticRepairsPolicy", "enabled") != true ||
				field(api[0].Inputs, "automaticRepairsPolicy", "repairAction") != "Reimage" || field(api[0].Inputs, "automaticRepairsPolicy", "gracePeriod") != "PT10M" {
				t.Errorf("apiserver scale set's automatic repairs %v, want enabled, Reimage after PT10M", r)
			}
			for _, p := range c.Pools {
				for _, s := range sets[spec.WorkerRole(p.Name)] {
					if r := field(s.Inputs, "automaticRepairsPolicy"); r != nil {
						t.Errorf("%s: automatic repairs %v: workers are repaired by remediation, behind its brake", s.Name, r)
					}
				}
			}

			for _, s := range append(api, sets[spec.WorkerRole(c.Pools[0].Name)]...) {
				if field(s.Inputs, "singlePlacementGroup") != false {
					t.Errorf("%s: singlePlacementGroup must be false", s.Name)
				}
			}
			for _, p := range c.Pools {
				got := sets[spec.WorkerRole(p.Name)]
				// InfiniBand reaches within one placement group, which holds 100 instances.
				size, _ := spec.VMCapacity(p.VMSize)
				limit := spec.MaxScaleSetInstances
				if size.InfiniBand {
					limit = 100
				}
				if want := max(1, (p.MaxNodes+limit-1)/limit); len(got) != want {
					t.Errorf("pool %s: %d scale sets, want %d", p.Name, len(got), want)
				}
				for _, s := range got {
					if spg := field(s.Inputs, "singlePlacementGroup"); spg != size.InfiniBand {
						t.Errorf("%s: singlePlacementGroup %v, want %v (InfiniBand %v)", s.Name, spg, size.InfiniBand, size.InfiniBand)
					}
					if zones := field(s.Inputs, "zones").([]any); size.InfiniBand && len(zones) != 1 {
						t.Errorf("%s: an InfiniBand scale set spans zones %v: one placement group is in one zone", s.Name, zones)
					}
					ips := field(s.Inputs, "virtualMachineProfile", "networkProfile", "networkInterfaceConfigurations").([]any)[0].(map[string]any)["ipConfigurations"].([]any)
					if len(ips) != p.MaxPods+1 {
						t.Errorf("%s: %d IP configurations, want %d (native pod IPs, L29)", s.Name, len(ips), p.MaxPods+1)
					}
				}
			}

			checkVNets(t, r)
		})
	}
}

// checkVNets: the control plane's VNet and every worker VNet, each worker VNet one subnet of its
// whole prefix holding exactly its scale sets' NICs, every pair of them peered both ways, the hub
// with the control plane's and (when it reaches them) the workers', and nothing else peered (L31).
func checkVNets(t *testing.T, r *Result) {
	t.Helper()
	c := r.Cluster
	vnetByID, prefixOf := map[string]string{}, map[string]string{}
	for _, v := range byType(r, "azure-native:network:VirtualNetwork") {
		prefixes := field(v.Inputs, "addressSpace", "addressPrefixes").([]any)
		vnetByID[v.Name], prefixOf[v.Name] = prefixes[0].(string), prefixes[0].(string)
	}
	want := append([]string{c.Network.AddressSpace}, c.NodeSubnets()...)
	if got := slices.Sorted(maps.Values(prefixOf)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("VNets %v, want the control plane's and every pool's %v", got, want)
	}
	subnetPrefix := map[string]string{}
	for _, s := range byType(r, "azure-native:network:Subnet") {
		subnetPrefix[s.Name] = s.Inputs["addressPrefix"].(string)
	}
	for _, s := range byType(r, "azure-native:compute:VirtualMachineScaleSet") {
		set, ok := scaleSetOf(c, s.Inputs["vmScaleSetName"].(string))
		if !ok {
			continue // the apiservers'
		}
		w, _ := c.VNetOf(set)
		for _, ip := range field(s.Inputs, "virtualMachineProfile", "networkProfile", "networkInterfaceConfigurations").([]any)[0].(map[string]any)["ipConfigurations"].([]any) {
			id := field(ip, "subnet", "id").(string)
			if got := subnetPrefix[id[strings.LastIndex(id, "/")+1:]]; got != w.Prefix {
				t.Fatalf("%s: a NIC in subnet %s, want its VNet %s's %s", set.AzureName, got, w.Name, w.Prefix)
			}
		}
	}
	// Peerings as pairs of prefixes (the hub by its id).
	peered := map[[2]string]bool{}
	for _, p := range byType(r, "azure-native:network:VirtualNetworkPeering") {
		local := prefixOf[p.Inputs["virtualNetworkName"].(string)]
		if p.Inputs["virtualNetworkName"] == c.HubVNet().Names[0] {
			local = "hub"
		}
		remoteID := field(p.Inputs, "remoteVirtualNetwork", "id").(string)
		remote := vnetByID[remoteID[strings.LastIndex(remoteID, "/")+1:]]
		if remoteID == c.Network.Hub.VNetID {
			remote = "hub"
		}
		if local == "" || remote == "" {
			t.Errorf("peering %s joins %q and %q: not this cluster's VNets or the hub", p.Name, local, remote)
		}
		peered[[2]string{local, remote}] = true
	}
	wantPeered := map[[2]string]bool{}
	pair := func(a, b string) { wantPeered[[2]string{a, b}], wantPeered[[2]string{b, a}] = true, true }
	pair(c.Network.AddressSpace, "hub")
	for i, w := range want[1:] {
		pair(w, c.Network.AddressSpace)
		for _, o := range want[1 : i+1] {
			pair(w, o)
		}
		if c.ReachWorkers() {
			pair(w, "hub")
		}
	}
	if !maps.Equal(peered, wantPeered) {
		t.Errorf("peerings %v, want %v", peered, wantPeered)
	}
}

func scaleSetOf(c *spec.Cluster, name string) (spec.ScaleSet, bool) {
	for _, s := range c.ScaleSets() {
		if s.AzureName == name {
			return s, true
		}
	}
	return spec.ScaleSet{}, false
}

// The main etcd's backups go to one private account: no public network, no shared keys, versions
// and soft delete, a private endpoint in the etcd subnet, and the etcd-main identity the only
// principal with data access, on the container alone (L02).
func TestBackupStoreIsPrivate(t *testing.T) {
	for stack, r := range planAll(t) {
		t.Run(stack, func(t *testing.T) {
			c := r.Cluster
			var a map[string]any
			for _, res := range byType(r, "azure-native:storage:StorageAccount") {
				if res.Inputs["accountName"] == c.BackupStorageAccount() {
					a = res.Inputs
				}
			}
			if a["publicNetworkAccess"] != "Disabled" || a["allowSharedKeyAccess"] != false ||
				a["allowBlobPublicAccess"] != false || field(a, "networkRuleSet", "defaultAction") != "Deny" {
				t.Errorf("storage account not private: %v", a)
			}
			services := slices.DeleteFunc(byType(r, "azure-native:storage:BlobServiceProperties"), func(res Resource) bool {
				return res.Inputs["accountName"] != c.BackupStorageAccount()
			})
			if len(services) != 1 || services[0].Inputs["isVersioningEnabled"] != true || field(services[0].Inputs, "deleteRetentionPolicy", "enabled") != true {
				t.Errorf("blob service without versioning and soft delete: %v", services)
			}
			var etcdSubnet string
			for _, s := range byType(r, "azure-native:network:Subnet") {
				if s.Inputs["addressPrefix"] == c.Network.EtcdSubnet {
					etcdSubnet = mockID(s)
				}
			}
			endpoints := byType(r, "azure-native:network:PrivateEndpoint")
			for _, e := range endpoints {
				if etcdSubnet == "" || field(e.Inputs, "subnet", "id") != etcdSubnet {
					t.Errorf("the private endpoint %s is not in the etcd subnet %s", e.Name, etcdSubnet)
				}
			}
			if len(endpoints) != 2 {
				t.Errorf("%d private endpoints, want the backup account's and the birth registry's", len(endpoints))
			}
			containers := slices.DeleteFunc(byType(r, "azure-native:storage:BlobContainer"), func(res Resource) bool {
				return res.Inputs["accountName"] != c.BackupStorageAccount()
			})
			if len(containers) != 1 || containers[0].Inputs["containerName"] != spec.BackupContainer {
				t.Fatalf("containers %v", containers)
			}
			var identity string
			for _, id := range byType(r, "azure-native:managedidentity:UserAssignedIdentity") {
				if role(id) == spec.RoleEtcdMain {
					identity = "principal-" + id.Name
				}
			}
			var holders []string
			for _, ra := range byType(r, "azure-native:authorization:RoleAssignment") {
				if strings.HasSuffix(ra.Inputs["roleDefinitionId"].(string), "/"+azurerbac.RoleStorageBlobDataContributor) {
					holders = append(holders, fmt.Sprintf("%v on %v", ra.Inputs["principalId"], ra.Inputs["scope"]))
				}
			}
			want := []string{identity + " on " + mockID(containers[0])}
			if !slices.Equal(holders, want) {
				t.Errorf("blob data access %v, want %v", holders, want)
			}
		})
	}
}

// blobContainer is the one container of that name in that account.
func blobContainer(t *testing.T, r *Result, account, name string) Resource {
	t.Helper()
	for _, res := range byType(r, "azure-native:storage:BlobContainer") {
		if res.Inputs["accountName"] == account && res.Inputs["containerName"] == name {
			return res
		}
	}
	t.Fatalf("no container %s in %s", name, account)
	return Resource{}
}

// The evidence that etcd existed outlives the cluster: its own resource group, locked against
// deletion and kept by `pulumi destroy`, births Azure keeps immutable, retirements the etcd
// identity may only read.
func TestBirthRegistryOutlivesTheCluster(t *testing.T) {
	for stack, r := range planAll(t) {
		t.Run(stack, func(t *testing.T) {
			c := r.Cluster
			var group Resource
			for _, rg := range byType(r, "azure-native:resources:ResourceGroup") {
				if rg.Inputs["resourceGroupName"] == c.BirthRegistryResourceGroup() {
					group = rg
				}
			}
			if group.Name == "" || c.BirthRegistryResourceGroup() == c.ResourceGroup() || !group.RetainOnDelete || !group.Protect {
				t.Fatalf("registry group %+v: want its own, retained and protected", group)
			}
			lock := only(t, r, "azure-native:authorization:ManagementLockAtResourceGroupLevel")
			if lock.Inputs["level"] != "CanNotDelete" || lock.Inputs["resourceGroupName"] != c.BirthRegistryResourceGroup() {
				t.Errorf("lock %v", lock.Inputs)
			}
			var account map[string]any
			for _, a := range byType(r, "azure-native:storage:StorageAccount") {
				if a.Inputs["accountName"] == c.BirthRegistryAccount() {
					account = a.Inputs
				}
			}
			if account["resourceGroupName"] != c.BirthRegistryResourceGroup() || account["publicNetworkAccess"] != "Disabled" || account["allowSharedKeyAccess"] != false {
				t.Errorf("registry account %v: want private, in the registry's group", account)
			}
			born := blobContainer(t, r, c.BirthRegistryAccount(), spec.BirthsContainer)
			if field(born.Inputs, "immutableStorageWithVersioning", "enabled") != true {
				t.Errorf("births container %v is not immutable", born.Inputs)
			}
			policy := only(t, r, "azure-native:storage:BlobContainerImmutabilityPolicy")
			if policy.Inputs["containerName"] != spec.BirthsContainer || policy.Inputs["immutabilityPeriodSinceCreationInDays"] != float64(azure.BirthRetentionDays) {
				t.Errorf("immutability policy %v", policy.Inputs)
			}
			// The etcd identity may add births, not overwrite or delete one, nor touch the container.
			births, assigned := mockID(born), 0
			for _, ra := range byType(r, "azure-native:authorization:RoleAssignment") {
				if ra.Inputs["scope"] != births {
					continue
				}
				assigned++
				var def Resource
				for _, d := range byType(r, "azure-native:authorization:RoleDefinition") {
					if strings.HasSuffix(ra.Inputs["roleDefinitionId"].(string), "/"+d.Name) {
						def = d
					}
				}
				perms, _ := def.Inputs["permissions"].([]any)
				var data []string
				if len(perms) == 1 {
					data = strs(field(perms[0], "dataActions"))
				}
				addOnly := slices.Contains(data, "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/add/action") && !slices.ContainsFunc(data, func(a string) bool {
					return !strings.HasSuffix(a, "/read") && !strings.HasSuffix(a, "/add/action")
				})
				if len(perms) != 1 || len(asList(field(perms[0], "actions"))) != 0 || !addOnly {
					t.Errorf("role on the births %s: %v", ra.Inputs["roleDefinitionId"], def.Inputs["permissions"])
				}
			}
			if assigned != 1 {
				t.Errorf("%d roles on the births, want the etcd identity's alone", assigned)
			}
			retired := mockID(blobContainer(t, r, c.BirthRegistryAccount(), spec.RetirementsContainer))
			var readers []string
			for _, ra := range byType(r, "azure-native:authorization:RoleAssignment") {
				if ra.Inputs["scope"] == retired {
					readers = append(readers, path.Base(ra.Inputs["roleDefinitionId"].(string)))
				}
			}
			if !slices.Equal(readers, []string{azurerbac.RoleStorageBlobDataReader}) {
				t.Errorf("roles on the retirements: %v, want the reader alone", readers)
			}
		})
	}
}

// mockID is the id the mock engine gives a resource.
// No identity of the cluster can run code on a machine (run command, extensions, an instance's
// model, a reimage) or holds a wildcard, and cluster-autoscaler can list what its start-up lists
// (cluster-autoscaler 1.36 lists the resource group's VMs even in scale-set mode, and exits when
// refused). The forbidden actions are Azure's, written here rather than read from azurerbac.
func TestNoIdentityRunsCodeOnAMachine(t *testing.T) {
	forbidden := []string{"*", "runCommand", "/extensions/", "virtualMachineScaleSets/virtualMachines/write", "Microsoft.Compute/virtualMachines/write",
		"/reimage", "/redeploy", "Microsoft.Compute/virtualMachineScaleSets/delete"}
	storage := []string{azurerbac.RoleStorageBlobDataContributor, azurerbac.RoleStorageBlobDataReader}
	for stack, r := range planAll(t) {
		t.Run(stack, func(t *testing.T) {
			definitions := map[string][]string{}
			for _, d := range byType(r, "azure-native:authorization:RoleDefinition") {
				for _, p := range asList(d.Inputs["permissions"]) {
					definitions[d.Name] = append(definitions[d.Name], strs(field(p, "actions"))...)
				}
			}
			autoscalerLists := false
			for _, ra := range byType(r, "azure-native:authorization:RoleAssignment") {
				id := ra.Inputs["roleDefinitionId"].(string)
				if slices.Contains(storage, path.Base(id)) {
					continue
				}
				actions, custom := []string(nil), false
				for name, a := range definitions {
					if strings.HasSuffix(id, "/"+name) {
						actions, custom = a, true
					}
				}
				if !custom {
					t.Errorf("%s holds the built-in role %s", ra.Name, path.Base(id))
				}
				for _, a := range actions {
					for _, f := range forbidden {
						// delete/action removes instances; deleting the scale set itself is forbidden.
						if strings.Contains(a, f) && a != "Microsoft.Compute/virtualMachineScaleSets/delete/action" {
							t.Errorf("%s may %s", ra.Name, a)
						}
					}
				}
				if strings.Contains(ra.Name, addons.AutoscalerName) && strings.HasSuffix(fmt.Sprint(ra.Inputs["scope"]), "/resourceGroups/"+r.Cluster.ResourceGroup()) &&
					slices.Contains(actions, "Microsoft.Compute/virtualMachines/read") && slices.Contains(actions, "Microsoft.Compute/virtualMachineScaleSets/read") {
					autoscalerLists = true
				}
			}
			if !autoscalerLists {
				t.Errorf("cluster-autoscaler cannot list the resource group's scale sets and VMs")
			}
		})
	}
}

func mockID(res Resource) string {
	rg, _ := res.Inputs["resourceGroupName"].(string)
	return fmt.Sprintf("%s/resourceGroups/%s/providers/%s/%s", mockSubscription, rg, res.Type, res.Name)
}

// The security rules reach Azure as the policy says (infra/azure judges the policy itself):
// every rule with its address sources or its VNet's nodes group, and every worker NIC's primary
// IP configuration in its VNet's nodes group, its pod IP configurations in none.
func TestSecurityGroupsReachAzure(t *testing.T) {
	r := planAll(t)["prod-7500"]
	network := r.Cluster.Name + "-network-"
	asg := map[string]string{} // worker VNet name -> its nodes group's mocked id
	for _, g := range byType(r, "azure-native:network:ApplicationSecurityGroup") {
		asg[strings.TrimSuffix(strings.TrimPrefix(g.Name, network), "-"+azure.GroupNodes+"-asg")] = mockID(g)
	}
	if len(asg) != len(r.Cluster.WorkerVNets()) {
		t.Fatalf("application security groups %v, want one a worker VNet", asg)
	}
	ids := func(v any) []string {
		var out []string
		for _, ref := range asList(v) {
			out = append(out, ref.(map[string]any)["id"].(string))
		}
		return out
	}
	policy := azure.InboundRules(r.Cluster)
	for _, nsg := range byType(r, "azure-native:network:NetworkSecurityGroup") {
		key := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(nsg.Name, network), "-nsg"), "-"+azure.SubnetNodes)
		groupIDs := func(names []string) []string {
			var out []string
			for range names { // GroupNodes: the NSG's own VNet's
				out = append(out, asg[key])
			}
			return out
		}
		got, want := asList(field(nsg.Inputs, "securityRules")), policy[key]
		if len(got) != len(want) {
			t.Fatalf("%s: %d rules, want %d", nsg.Name, len(got), len(want))
		}
		for i, raw := range got {
			rule, w := raw.(map[string]any), want[i]
			if rule["name"] != w.Name || rule["access"] != w.Access || rule["description"] != w.Consumer ||
				!slices.Equal(strs(rule["sourceAddressPrefixes"]), w.Sources) ||
				!slices.Equal(ids(rule["sourceApplicationSecurityGroups"]), groupIDs(w.SourceGroups)) ||
				!slices.Equal(ids(rule["destinationApplicationSecurityGroups"]), groupIDs(w.DestinationGroups)) ||
				!slices.Equal(strs(rule["destinationPortRanges"]), w.Ports) {
				t.Errorf("%s rule %d: %v, want %+v", nsg.Name, i, rule, w)
			}
		}
	}
	for _, s := range byType(r, "azure-native:compute:VirtualMachineScaleSet") {
		set, ok := scaleSetOf(r.Cluster, s.Inputs["vmScaleSetName"].(string))
		if !ok {
			continue
		}
		w, _ := r.Cluster.VNetOf(set)
		ips := asList(field(s.Inputs, "virtualMachineProfile", "networkProfile", "networkInterfaceConfigurations").([]any)[0].(map[string]any)["ipConfigurations"])
		for i, ip := range ips {
			var want []string
			if i == 0 {
				want = []string{asg[w.Name]}
			}
			if got := ids(ip.(map[string]any)["applicationSecurityGroups"]); !slices.Equal(got, want) {
				t.Fatalf("%s IP configuration %d is in %v, want %v", s.Name, i, got, want)
			}
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func strs(v any) []string {
	var out []string
	for _, x := range asList(v) {
		out = append(out, x.(string))
	}
	return out
}

func contains(list []any, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestSecretsStaySecret: customData (private keys, the bootstrap token) and every key never
// appear in the plan's resources.json.
func TestSecretsStaySecret(t *testing.T) {
	for stack, r := range planAll(t) {
		js, err := json.Marshal(r.Resources)
		if err != nil {
			t.Fatal(err)
		}
		for _, leak := range []string{"PRIVATE KEY", "token: ", "client-key-data"} {
			if strings.Contains(string(js), leak) {
				t.Errorf("%s: resources.json contains %q", stack, leak)
			}
		}
		for _, s := range byType(r, "azure-native:compute:VirtualMachineScaleSet") {
			if got := field(s.Inputs, "virtualMachineProfile", "osProfile", "customData"); got != "[secret]" {
				t.Errorf("%s: %s customData is not secret", stack, s.Name)
			}
		}
		for _, vm := range byType(r, "azure-native:compute:VirtualMachine") {
			if got := field(vm.Inputs, "osProfile", "customData"); got != "[secret]" {
				t.Errorf("%s: %s customData is not secret", stack, vm.Name)
			}
		}
		if !strings.Contains(r.UserData[spec.RoleAPIServer], "PRIVATE KEY") {
			t.Errorf("%s: apiserver user-data carries no keys; the capture is broken", stack)
		}
	}
}

// TestGoldenUserData compares every role's user-data with testdata/<stack>/<role>.user-data.
// Run `go test ./infra/offline -run Golden -update` to accept a change, then review the diff.
func TestGoldenUserData(t *testing.T) {
	for stack, r := range planAll(t) {
		if len(r.UserData) != len(r.Cluster.Roles()) {
			t.Errorf("%s: user-data for %d roles, want %d", stack, len(r.UserData), len(r.Cluster.Roles()))
		}
		for role, ud := range r.UserData {
			path := filepath.Join("testdata", stack, role+".user-data")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(ud), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(want) != ud {
				t.Errorf("%s differs from the rendered user-data; run `go test ./infra/offline -run Golden -update` and review the diff", path)
			}
		}
	}
}

// TestGoldenHeadroom keeps every checked-in stack's headroom tables: one row per Azure limit, and
// the control plane's CPU from the published scale benchmark figures.
func TestGoldenHeadroom(t *testing.T) {
	for stack, r := range planAll(t) {
		if uses := r.LimitUses(); len(uses) != len(spec.Limits) {
			t.Errorf("%s: %d limits have a row, want all %d", stack, len(uses), len(spec.Limits))
		}
		var b strings.Builder
		r.Headroom(&b)
		r.ControlPlaneCPU(&b)
		path := filepath.Join("testdata", stack, "headroom.txt")
		if *update {
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if string(want) != b.String() {
			t.Errorf("%s differs from the headroom table; run `go test ./infra/offline -run Golden -update` and review the diff", path)
		}
	}
}

// requireTool finds a validator scripts/setup.sh installs; a missing one fails the test, never skips it.
func requireTool(t *testing.T, name string) string {
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: run scripts/setup.sh (make check does)", name)
	}
	return path
}

func TestUserDataPassesCloudInitSchema(t *testing.T) {
	cloudInit := requireTool(t, "cloud-init")
	dir := t.TempDir()
	for stack, r := range planAll(t) {
		for role, ud := range r.UserData {
			path := filepath.Join(dir, stack+"-"+role)
			if err := os.WriteFile(path, []byte(ud), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(cloudInit, "schema", "-c", path).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Valid cloud-config") {
				t.Errorf("%s/%s: cloud-init schema: %v\n%s", stack, role, err, out)
			}
		}
	}
}

var execStart = regexp.MustCompile(`(?m)^ExecStart(?:Pre|Post)?=-?(\S+)`)

// TestUnitsPassSystemdVerify materialises each role's write_files into a root directory, with
// the host's systemd targets and a stand-in for every binary the node image provides, and runs
// `systemd-analyze verify --root` on every unit.
func TestUnitsPassSystemdVerify(t *testing.T) {
	analyze := requireTool(t, "systemd-analyze")
	for stack, r := range planAll(t) {
		for role, ud := range r.UserData {
			root := t.TempDir()
			var cfg struct {
				WriteFiles []struct{ Path, Content, Permissions string } `yaml:"write_files"`
			}
			if err := yaml.Unmarshal([]byte(ud), &cfg); err != nil {
				t.Fatal(err)
			}
			var units []string
			for _, f := range cfg.WriteFiles {
				mode, err := strconv.ParseUint(f.Permissions, 8, 32)
				if err != nil {
					t.Fatalf("%s/%s: %s: permissions %q: %v", stack, role, f.Path, f.Permissions, err)
				}
				writeFile(t, filepath.Join(root, f.Path), f.Content, os.FileMode(mode))
				if strings.HasPrefix(f.Path, "/etc/systemd/system/") && !strings.Contains(f.Path, ".d/") { // drop-ins load with their unit
					units = append(units, f.Path)
					for _, m := range execStart.FindAllStringSubmatch(f.Content, -1) {
						if _, err := os.Stat(filepath.Join(root, m[1])); os.IsNotExist(err) {
							writeFile(t, filepath.Join(root, m[1]), "#!/bin/sh\n", 0o755) // provided by the node image
						}
					}
				}
			}
			if err := os.MkdirAll(filepath.Join(root, "lib", "systemd"), 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("cp", "-r", "/lib/systemd/system", filepath.Join(root, "lib", "systemd", "system")).CombinedOutput(); err != nil {
				t.Fatalf("copy systemd targets: %v %s", err, out)
			}
			sort.Strings(units)
			args := append([]string{"verify", "--man=no", "--root=" + root}, units...)
			if out, err := exec.Command(analyze, args...).CombinedOutput(); err != nil || len(out) > 0 {
				t.Errorf("%s/%s: systemd-analyze verify: %v\n%s", stack, role, err, out)
			}
		}
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// The issuer's documents are public where the apiservers' flags say tokens come from, and Entra
// ID trusts each workload's tokens for that workload's identity alone.
func TestIssuerPublishedAndFederated(t *testing.T) {
	for stack, r := range planAll(t) {
		t.Run(stack, func(t *testing.T) {
			c := r.Cluster
			issuer := c.ServiceAccountIssuer()
			if !strings.Contains(r.UserData[spec.RoleAPIServer], "--service-account-issuer="+issuer+" ") {
				t.Errorf("the apiservers do not sign tokens as %s", issuer)
			}
			blobs := map[string]string{}
			for _, b := range byType(r, "azure-native:storage:Blob") {
				if b.Inputs["accountName"] != c.IssuerStorageAccount() || b.Inputs["containerName"] != spec.IssuerContainer {
					t.Errorf("blob %s outside the issuer's container: %v", b.Name, b.Inputs)
				}
				blobs[b.Inputs["blobName"].(string)] = fmt.Sprint(b.Inputs["source"])
			}
			if !strings.Contains(blobs[pki.IssuerDiscoveryPath], `"issuer":"`+issuer+`"`) || !strings.Contains(blobs[pki.IssuerKeysPath], `"kty":"RSA"`) {
				t.Errorf("issuer documents %v", blobs)
			}
			if !strings.HasPrefix(issuer, "https://"+c.IssuerStorageAccount()+".blob.core.windows.net/") {
				t.Errorf("issuer %s is not the issuer account's blob endpoint", issuer)
			}
			account := ""
			for _, a := range byType(r, "azure-native:storage:StorageAccount") {
				if a.Inputs["accountName"] == c.IssuerStorageAccount() {
					account = a.Name
				}
			}
			if lock := only(t, r, "azure-native:authorization:ManagementLockByScope"); lock.Inputs["level"] != "CanNotDelete" ||
				account == "" || !strings.HasSuffix(fmt.Sprint(lock.Inputs["scope"]), "/"+account) {
				t.Errorf("the issuer's account %q is not locked against deletion: %v", account, lock.Inputs)
			}
			for _, res := range byType(r, "azure-native:storage:BlobContainer") {
				if res.Inputs["accountName"] == c.IssuerStorageAccount() && res.Inputs["publicAccess"] != "Blob" {
					t.Errorf("the issuer's container is not readable by Entra ID: %v", res.Inputs)
				}
			}
			federated := byType(r, "azure-native:managedidentity:FederatedIdentityCredential")
			if len(federated) != len(addons.AzureWorkloads) {
				t.Fatalf("%d federated credentials, want one per workload %v", len(federated), addons.AzureWorkloads)
			}
			for i, w := range addons.AzureWorkloads {
				f := federated[i].Inputs
				if f["issuer"] != issuer || f["subject"] != "system:serviceaccount:kube-system:"+w || fmt.Sprint(f["audiences"]) != "[api://AzureADTokenExchange]" ||
					f["resourceName"] != c.Name+"-"+w+"-identity" {
					t.Errorf("%s's federated credential %v", w, f)
				}
			}
		})
	}
}

// TestResourceCountIndependentOfNodes: growing a pool's instance count changes no resource
// count (pools are scale sets); only capacity crosses into another scale set per 1,000 nodes.
func TestResourceCountIndependentOfNodes(t *testing.T) {
	base := planAll(t)["prod-10k"]
	data, err := os.ReadFile(stackFile("prod-10k"))
	if err != nil {
		t.Fatal(err)
	}
	grown := strings.Replace(string(data), "nodes: 100\n", "nodes: 1900\n", 1)
	path := filepath.Join(t.TempDir(), "Pulumi.grown.yaml")
	writeFile(t, path, grown, 0o644)
	r, err := Run("grown", path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Resources) != len(base.Resources) {
		t.Errorf("19x the nodes gave %d resources, want %d", len(r.Resources), len(base.Resources))
	}
	// Beyond each scale set and the autoscaler's, remediation's and the CSR approver's grants on it
	// (100 instances a set for InfiniBand pools), the count is the cluster's and its VNets'.
	if others := len(base.Resources) - 4*len(byType(base, "azure-native:compute:VirtualMachineScaleSet")); others > base.Cluster.TargetNodes/25 {
		t.Errorf("prod-10k plans %d resources besides its scale sets; a 10,000-node cluster should need far fewer than one per node", others)
	}
}

func BenchmarkPlanProd10k(b *testing.B) {
	for b.Loop() {
		r, err := Run("prod-10k", stackFile("prod-10k"), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(r.Resources)), "resources")
	}
}

// TestChildrenFollowComponentConventions: every resource below the Cluster component is
// parented to a component and named "<parent>-<role>".
func TestChildrenFollowComponentConventions(t *testing.T) {
	r := planAll(t)["dev"]
	for _, res := range r.Resources {
		if res.Type == "clusterforge:azure:Cluster" || res.Type == "clusterforge:kube:Addons" { // the program's own
			continue
		}
		if res.Parent == "" || !strings.HasPrefix(res.Name, res.Parent+"-") {
			t.Errorf("%s %s: parent %q; want a component parent and its name as prefix", res.Type, res.Name, res.Parent)
		}
	}
}

// Every add-on object of every stack is registered once, with its own Kubernetes type, through the
// add-ons' provider, whose kubeconfig reaches the new cluster's apiserver with its CA.
func TestAddonsRegisteredThroughTheClusterProvider(t *testing.T) {
	for stack, r := range planAll(t) {
		t.Run(stack, func(t *testing.T) {
			c := r.Cluster
			provider := only(t, r, "pulumi:providers:kubernetes").Name
			kubeconfig := r.Kubeconfigs[provider]
			if !strings.Contains(kubeconfig, `server: "`+c.APIServerURL()+`"`) || !strings.Contains(kubeconfig, "certificate-authority-data:") {
				t.Errorf("provider %s does not target the new cluster %s:\n%s", provider, c.APIServerURL(), kubeconfig)
			}
			objs, err := addons.Objects(c)
			if err != nil {
				t.Fatal(err)
			}
			azure, err := addons.AzureObjects(c, addons.Azure{})
			if err != nil {
				t.Fatal(err)
			}
			opsTLS, err := addons.OpsTLS("", "", "")
			if err != nil {
				t.Fatal(err)
			}
			want, err := clusteraddons.Resources(c.Name+"-addons", append(append(objs, azure...), opsTLS))
			if err != nil {
				t.Fatal(err)
			}
			// A join token Secret a pool: named after its token (of the mock engine's seed), kept
			// when a rotation replaces it.
			seed := strings.Repeat("a", pki.JoinSeedLength)
			for _, p := range c.Pools {
				token := Resource{}
				for _, res := range r.Resources {
					if res.Name == c.Name+"-addons-secret-kube-system-bootstrap-token-"+p.Name {
						token = res
					}
				}
				id, _, _ := strings.Cut(pki.JoinToken(seed, p.Name), ".")
				if !token.RetainOnDelete || field(token.Inputs, "metadata", "name") != "bootstrap-token-"+id || field(token.Inputs, "type") != "bootstrap.kubernetes.io/token" {
					t.Errorf("pool %s's join token Secret %+v, want bootstrap-token-%s, retained on delete", p.Name, token, id)
				}
				want = append(want, clusteraddons.Resource{Type: token.Type, Name: token.Name, Args: map[string]any{"kind": "Secret"}})
			}
			got := map[string]Resource{}
			for _, res := range r.Resources {
				if strings.HasPrefix(res.Type, "kubernetes:") {
					got[res.Type+" "+res.Name] = res
				}
			}
			if len(got) != len(want) {
				t.Errorf("%d Kubernetes resources registered, want %d", len(got), len(want))
			}
			for _, w := range want {
				res, ok := got[w.Type+" "+w.Name]
				switch {
				case !ok:
					t.Errorf("%s %s is not registered", w.Type, w.Name)
				case res.Provider != provider:
					t.Errorf("%s %s is managed by %q, want the cluster's provider %s", w.Type, w.Name, res.Provider, provider)
				case field(res.Inputs, "kind") != w.Args["kind"]:
					t.Errorf("%s %s registers kind %v", w.Type, w.Name, field(res.Inputs, "kind"))
				}
			}
			// Through the handoff: the identities the infrastructure made, the tenant, the public cloud.
			cloud := got["kubernetes:core/v1:Secret "+c.Name+"-addons-secret-kube-system-"+addons.AutoscalerCloudConfigSecret]
			if data := field(cloud.Inputs, "stringData"); data != "[secret]" {
				t.Errorf("cluster-autoscaler's cloud config is %v, want a Pulumi secret", data)
			}
			env := got["kubernetes:core/v1:ConfigMap "+c.Name+"-addons-configmap-kube-system-"+addons.AzureEnvironmentConfigMap]
			if text := fmt.Sprint(field(env.Inputs, "data")); !strings.Contains(text, `"resourceManagerEndpoint": "`+azurecloud.Public.ResourceManagerEndpoint+`"`) {
				t.Errorf("the cloud's environment is not Azure's public cloud:\n%v", field(env.Inputs, "data"))
			}
			for _, w := range addons.AzureWorkloads {
				cm := got["kubernetes:core/v1:ConfigMap "+c.Name+"-addons-configmap-kube-system-"+addons.AzureIdentityConfigMap(w)]
				if id := field(cm.Inputs, "data", "AZURE_CLIENT_ID"); id != "client-"+c.Name+"-"+w+"-identity" {
					t.Errorf("%s signs in as %v, want its own identity", w, id)
				}
				if tenant := field(cm.Inputs, "data", "AZURE_TENANT_ID"); tenant != mockTenant {
					t.Errorf("%s signs in at tenant %v, want %s", w, tenant, mockTenant)
				}
			}
		})
	}
}

// Machines receive the admin key as parsed (type and key), never the stack's line as given.
func TestAdminKeyIsTheParsedKey(t *testing.T) {
	data, err := os.ReadFile(stackFile("dev"))
	if err != nil {
		t.Fatal(err)
	}
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILzbaN45lTkwo4j/NEz0vGJFBYoJuyvlLejidv6xgJRh"
	withKey := strings.Replace(string(data), "    name: cf-dev\n", "    name: cf-dev\n    admin:\n      sshPublicKey: "+key+" ops@laptop\n", 1)
	path := filepath.Join(t.TempDir(), "Pulumi.keyed.yaml")
	writeFile(t, path, withKey, 0o644)
	r, err := Run("keyed", path, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(r.Resources)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(js), `"keyData":"`+key+`"`); n == 0 || strings.Contains(string(js), "ops@laptop") {
		t.Errorf("%d machines got the parsed key; the comment reached them: %v", n, strings.Contains(string(js), "ops@laptop"))
	}
}

// L05: automatic repairs judge the apiservers by the Application Health extension's probe of each
// apiserver's own liveness, not by the load balancer's readiness probe, which a main-etcd outage
// fails on every apiserver at once: the extension's path leaves out /livez's etcd checks. Azure
// takes one health source, never both, and no other scale set has either.
func TestRepairsJudgeTheAPIServersOwnLiveness(t *testing.T) {
	for stack, r := range planAll(t) {
		for _, s := range byType(r, "azure-native:compute:VirtualMachineScaleSet") {
			name := s.Inputs["vmScaleSetName"].(string)
			extensions := asList(field(s.Inputs, "virtualMachineProfile", "extensionProfile", "extensions"))
			if probe := field(s.Inputs, "virtualMachineProfile", "networkProfile", "healthProbe"); probe != nil {
				t.Errorf("%s %s: a load balancer health probe %v; repairs judge by the health extension", stack, name, probe)
			}
			if name != r.Cluster.APIServerName() {
				if len(extensions) > 0 {
					t.Errorf("%s %s: extensions %v on a worker scale set", stack, name, extensions)
				}
				continue
			}
			if len(extensions) != 1 {
				t.Fatalf("%s %s: extensions %v, want the Application Health extension", stack, name, extensions)
			}
			ext := extensions[0].(map[string]any)
			settings, _ := ext["settings"].(map[string]any)
			// 1.0: binary health states, a 200 is healthy; 2.0's rich states would call /livez's
			// plain "ok" Unknown, which repairs reimage.
			if ext["type"] != azure.HealthExtensionType || ext["typeHandlerVersion"] != "1.0" || settings["protocol"] != "https" || settings["port"] != float64(wellknown.APIServerPort) {
				t.Errorf("%s %s: health extension %v", stack, name, ext)
			}
			u, err := url.Parse(fmt.Sprint(settings["requestPath"]))
			if err != nil || u.Path != "/livez" || !slices.Contains(u.Query()["exclude"], "etcd") || !slices.Contains(u.Query()["exclude"], "etcd-override-0") {
				t.Errorf("%s %s: the extension probes %v; want /livez without etcd's checks", stack, name, settings["requestPath"])
			}
		}
	}
}
