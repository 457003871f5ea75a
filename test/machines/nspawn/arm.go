package nspawn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	azarm "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"

	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/azurerbac"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/arm"
	"github.com/clusterforge/clusterforge/test/standin/entra"
	"github.com/clusterforge/clusterforge/test/standin/imds"
)

// WireFile is where Resource Manager's and Entra ID's stand-ins keep what they exchanged, bodies
// and all: Resource Manager's with cluster-autoscaler, Entra ID's with everyone;
// a run of the real autoscaler leaves its fixtures there (replayed by test/standin/arm and entra).
const WireFile = "wire.jsonl"

// ARMSpeedup runs the stand-in's time ten times faster than real time: the apiservers' repair
// grace period is a minute, a reimage's latency 18 s.
const ARMSpeedup = 10

// Cloud is the cloud the booted cluster's workloads call: Azure's public cloud, whose names Azure
// DNS's stand-in resolves to the stand-ins of Resource Manager and Entra ID.
func (b *Booted) Cloud() azurecloud.Cloud { return azurecloud.Public }

func (b *Booted) armDir() string { return filepath.Join(b.Dir, "arm") }

// ARMCallsFile holds every request the stand-in answered, one JSON line each.
func (b *Booted) ARMCallsFile() string { return filepath.Join(b.armDir(), "calls.jsonl") }

// ARMCalls are the requests the stand-in answered so far.
func (b *Booted) ARMCalls() ([]arm.Call, error) { return standin.Lines[arm.Call](b.ARMCallsFile()) }

// armInventory is the booted machines as Resource Manager lists them: the apiservers' and the
// workers' scale-set instances by the resource IDs the metadata service gives them, and the etcd
// members as VMs.
func (b *Booted) armInventory() arm.Inventory {
	var inv arm.Inventory
	for _, m := range b.Machines {
		meta := b.metadata(m)
		in, err := scaleset.ParseProviderID(scaleset.ProviderIDPrefix + meta.ResourceID)
		if err != nil {
			inv.VMs = append(inv.VMs, arm.VM{Name: m.Name, ComputerName: m.Name, VMID: meta.VMID})
			continue
		}
		// Resource Manager names the gallery image version the machine's model boots.
		image := b.Cluster.ControlPlaneImage
		worker, isWorker := b.Cluster.ScaleSetOf(in.ScaleSet)
		if isWorker {
			image = worker.Pool.Image
		}
		i := slices.IndexFunc(inv.ScaleSets, func(s arm.ScaleSet) bool { return s.Name == in.ScaleSet })
		if i < 0 {
			set := arm.ScaleSet{Name: in.ScaleSet, SKU: meta.VMSize, ComputerNamePrefix: m.Name[:len(m.Name)-wellknown.ComputerNameSuffix], Image: image,
				Tags: map[string]string{wellknown.TagCluster: b.Cluster.Name, wellknown.TagRole: m.Role}}
			if isWorker {
				maps.Copy(set.Tags, machine.NodeTemplateTags(worker)) // as the Pulumi program tags them
				set.SinglePlacementGroup, set.Zones = worker.SinglePlacementGroup, worker.Zones
			}
			inv.ScaleSets = append(inv.ScaleSets, set)
			i = len(inv.ScaleSets) - 1
		}
		inv.ScaleSets[i].Instances = append(inv.ScaleSets[i].Instances, &arm.Instance{ID: in.ID, ComputerName: m.Name, VMID: meta.VMID, Zone: m.Zone, Image: image, PrivateIP: meta.PrivateIP})
		if m.Role == spec.RoleAPIServer {
			// As the program enables them; suspended until a test resumes them, since the boot
			// itself does not run faster as the grace period does.
			inv.ScaleSets[i].Repairs = &arm.Repairs{Enabled: true, GracePeriod: spec.APIServerRepairGracePeriod, Action: spec.APIServerRepairAction, Suspended: true}
		}
	}
	// Every scale set the program makes exists on Azure, an empty pool's too (0 instances), which
	// cluster-autoscaler lists and grows from zero by its tags.
	for _, set := range b.Cluster.ScaleSets() {
		if slices.ContainsFunc(inv.ScaleSets, func(s arm.ScaleSet) bool { return s.Name == set.AzureName }) {
			continue
		}
		role := spec.WorkerRole(set.Pool.Name)
		tags := map[string]string{wellknown.TagCluster: b.Cluster.Name, wellknown.TagRole: role}
		maps.Copy(tags, machine.NodeTemplateTags(set))
		inv.ScaleSets = append(inv.ScaleSets, arm.ScaleSet{Name: set.AzureName, SKU: set.Pool.VMSize, ComputerNamePrefix: set.AzureName,
			Image: set.Pool.Image, Tags: tags, SinglePlacementGroup: set.SinglePlacementGroup, Zones: set.Zones})
	}
	return inv
}

// startARM writes the stand-in's inventory and the workloads' role assignments, and starts it with
// Entra ID's serving pair and token signing key.
func (b *Booted) startARM() error {
	inventory, err := json.MarshalIndent(b.armInventory(), "", "  ")
	if err != nil {
		return err
	}
	operator := arm.Assignment{Principal: machines.RehearsalOperatorID, Scope: machines.RehearsalGroupID(b.Cluster),
		Actions: azurerbac.BuiltInRoleActions[azurerbac.RoleVirtualMachineContributor]}
	assignments, err := json.MarshalIndent(append(machines.RehearsalAssignments(b.Cluster), operator), "", "  ")
	if err != nil {
		return err
	}
	dir := b.armDir()
	for name, content := range map[string][]byte{"inventory.json": inventory, "assignments.json": assignments} {
		if err := machines.WriteFile(filepath.Join(dir, name), string(content), 0o644); err != nil {
			return err
		}
	}
	if err := removeRecords(b.ARMCallsFile(), filepath.Join(dir, WireFile)); err != nil {
		return err
	}
	socket := filepath.Join(dir, "machines.sock")
	_ = os.Remove(socket)
	if b.machinesSocket, err = net.Listen("unix", socket); err != nil {
		return err
	}
	go func() { _ = arm.ServeMachines(b.machinesSocket, bootMachines{b}) }()
	return b.startService("arm", append(slices.Clone(b.Self), "arm", "--listen="+net.JoinHostPort(armAddr.String(), "443"),
		"--speedup="+strconv.Itoa(ARMSpeedup), "--health-port="+strconv.Itoa(wellknown.APIServerPort), "--health-path="+spec.APIServerRepairProbePath,
		"--health-probes="+strconv.Itoa(spec.APIServerProbeFailures), "--machines="+socket,
		"--cert="+b.entraCert(), "--key="+b.entraKey(),
		"--subscription="+machines.RehearsalSubscriptionID, "--resource-group="+b.Cluster.ResourceGroup(), "--location="+b.Cluster.Location,
		"--tenant="+machines.RehearsalTenantID, "--authority-host="+b.AuthorityHost(), "--token-key="+b.entraSigningKey(),
		"--inventory="+filepath.Join(dir, "inventory.json"), "--assignments="+filepath.Join(dir, "assignments.json"), "--calls="+b.ARMCallsFile(),
		"--wire="+filepath.Join(dir, WireFile), "--wire-agent="+addons.AutoscalerName)) // what its User-Agent holds
}

// removeRecords removes what a stand-in recorded in an earlier boot of the same name: the tests
// read its records as this boot's.
func removeRecords(files ...string) error {
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// bootMachines are the booted machines behind the stand-in's instances while the booting process
// runs: a worker scale set's growth boots a machine that joins, a deleted instance's machine is
// removed, and a reimage boots the machine afresh from new disks (etcd members refused).
type bootMachines struct{ b *Booted }

func (m bootMachines) Create(ctx context.Context, in arm.Instance) (string, error) {
	return m.b.createInstance(ctx, in)
}
func (m bootMachines) Delete(ctx context.Context, in arm.Instance) error {
	return m.b.deleteInstance(ctx, in)
}
func (m bootMachines) Reimage(ctx context.Context, in arm.Instance) error {
	return m.b.reimage(ctx, in.ComputerName)
}
func (m bootMachines) RunCommand(context.Context, string, []string) (string, string, error) {
	return "", "", errors.New("the booted machines run no commands through Resource Manager")
}

// ComputeAs is the Azure SDK's Compute clients signed in as principal (RehearsalOperatorID, or a
// workload's RehearsalClientIDs), reaching the stand-in through the hub's network.
func (b *Booted) ComputeAs(principal string) (*armcompute.ClientFactory, error) {
	key, err := entra.ReadSigningKey(b.entraSigningKey())
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(b.entraCert())
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{DialContext: b.Dial, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	issuer := &entra.Server{Tenant: machines.RehearsalTenantID, SigningKey: key, Now: time.Now}
	return armcompute.NewClientFactory(machines.RehearsalSubscriptionID, arm.Credential(issuer, principal),
		&azarm.ClientOptions{ClientOptions: policy.ClientOptions{Transport: client, Cloud: b.Cloud().SDK()}})
}

// approverRootsFile is where an apiserver machine keeps the roots its CSR approver trusts.
const approverRootsFile = "/etc/clusterforge/rehearsal/roots.pem"

// approverAzure has the apiserver machines' CSR approver trust the stand-ins through the Azure
// SDK's own configuration: roots holding the stand-ins' serving certificate and the attested
// documents' root (Azure's are public roots).
func (b *Booted) approverAzure() ([]machine.File, error) {
	var roots []byte
	for _, f := range []string{b.entraCert(), filepath.Join(b.attestationDir(), imds.RootFile)} {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		roots = append(roots, data...)
	}
	dropIn := fmt.Sprintf("[Service]\nEnvironment=SSL_CERT_FILE=%s\n", approverRootsFile)
	return []machine.File{
		{Path: approverRootsFile, Content: string(roots), Mode: 0o644},
		{Path: machine.UnitDir + "/" + machine.CSRApproverUnit + ".d/50-rehearsal-azure.conf", Content: dropIn, Mode: 0o644},
	}, nil
}
