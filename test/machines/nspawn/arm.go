package nspawn

import (
	"encoding/json"
	"net"
	"path/filepath"
	"slices"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/arm"
)

// armPort is where Resource Manager's stand-in (deviation "Resource Manager") listens: beside
// Entra ID's, on its address and with its certificate.
const armPort = "8443"

// Cloud is the cloud the booted cluster's workloads call: the stand-ins of Resource Manager and
// Entra ID, a custom cloud to the SDKs.
func (b *Booted) Cloud() azurecloud.Cloud {
	return azurecloud.Cloud{Name: azurecloud.Custom, ResourceManagerEndpoint: "https://" + net.JoinHostPort(b.entraHost(), armPort) + "/",
		AuthorityHost: b.AuthorityHost(), TokenAudience: azurecloud.Public.TokenAudience}
}

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
		in, err := scaleset.ParseProviderID("azure://" + meta.ResourceID)
		if err != nil {
			inv.VMs = append(inv.VMs, arm.VM{Name: m.Name, ComputerName: m.Name})
			continue
		}
		i := slices.IndexFunc(inv.ScaleSets, func(s arm.ScaleSet) bool { return s.Name == in.ScaleSet })
		if i < 0 {
			inv.ScaleSets = append(inv.ScaleSets, arm.ScaleSet{Name: in.ScaleSet, SKU: meta.VMSize, ComputerNamePrefix: m.Name[:len(m.Name)-6], Image: m.Image})
			i = len(inv.ScaleSets) - 1
		}
		inv.ScaleSets[i].Instances = append(inv.ScaleSets[i].Instances, &arm.Instance{ID: in.ID, ComputerName: m.Name, Zone: m.Zone, Image: m.Image})
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
	assignments, err := json.MarshalIndent(machines.RehearsalAssignments(b.Cluster), "", "  ")
	if err != nil {
		return err
	}
	dir := b.armDir()
	for name, content := range map[string][]byte{"inventory.json": inventory, "assignments.json": assignments} {
		if err := machines.WriteFile(filepath.Join(dir, name), string(content), 0o644); err != nil {
			return err
		}
	}
	return b.startService("arm", append(slices.Clone(b.Self), "arm", "--listen="+net.JoinHostPort(b.entraHost(), armPort),
		"--cert="+filepath.Join(b.entraDir(), "tls.crt"), "--key="+filepath.Join(b.entraDir(), "tls.key"),
		"--subscription="+machines.RehearsalSubscriptionID, "--resource-group="+b.Cluster.ResourceGroup(), "--location="+b.Cluster.Location,
		"--tenant="+machines.RehearsalTenantID, "--authority-host="+b.AuthorityHost(), "--token-key="+b.entraSigningKey(),
		"--inventory="+filepath.Join(dir, "inventory.json"), "--assignments="+filepath.Join(dir, "assignments.json"), "--calls="+b.ARMCallsFile()))
}
