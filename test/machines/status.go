package machines

import (
	"fmt"
	"strings"
)

// Part is one row of the README's status: a part of clusterforge, what of it has run for real
// and against what, what never ran against Azure, and the deviations (by topic) its runs rest on.
// Every deviation belongs to a part, so the status cannot claim a run the list does not qualify.
type Part struct {
	Name, Ran, NeverOnAzure string
	Deviations              []string
}

// Status is the README's status table, part by part.
var Status = []Part{
	{Name: "the plan (`make plan`: spec, sizes, Azure's limits at full size)",
		Ran:          "offline, every stack, at `targetNodes` and `maxNodes`",
		NeverOnAzure: "Azure's quotas of a real subscription"},
	{Name: "infrastructure program (`infra/program`: scale sets, networks, identities, roles)",
		Ran:          "on Pulumi's mock engine only (the azure-native provider is not served here)",
		NeverOnAzure: "every resource it creates",
		Deviations:   []string{"pki", "Pulumi"}},
	{Name: "add-ons program (`infra/services`)",
		Ran:        "`pulumi up` with the real engine and Kubernetes provider, on the booted cluster",
		Deviations: []string{"Pulumi", "add-ons"}},
	{Name: "node images (Packer and our plugin)",
		Ran:          "baked locally into root filesystems that the booted machines run; `packer validate` of both templates with the variables a publish writes (`make check`; `make image-publish DRY_RUN=1` for a stack)",
		NeverOnAzure: "the azure-arm build and the gallery publish (`make image-publish`)",
		Deviations:   []string{"no image", "preloaded images"}},
	{Name: "machines (cloud-init, systemd, containerd, kubelet, etcd, apiservers)",
		Ran:          "booted from those images, joined, serving real containers",
		NeverOnAzure: "Azure's VMs, disks and network",
		Deviations: []string{"addresses", "network", "load balancer", "CPUs and memory", "localhost", "instance metadata",
			"Azure DNS", "cloud-init datasource", "OS disk", "local disk", "machine stop", "endpoint reconciler", "systemd",
			"machine cgroups", "cgroup v2", "kernel", "workers", "pod IPs", "automatic repairs"}},
	{Name: "day-2 (`forge diff`, `forge roll`, `forge grow`, backups, restores)",
		Ran:          "on the rehearsal and booted machines; the Azure executor against the SDK's fakes and the Resource Manager stand-in",
		NeverOnAzure: "a roll, grow or restore of an Azure cluster",
		Deviations:   []string{"roll", "backup store"}},
	{Name: "in-cluster components (CSR approver, clusterforge-ops, add-ons)",
		Ran:          "on the booted cluster, calling the stand-ins through their normal Azure configuration",
		NeverOnAzure: "Azure's own Resource Manager, Entra ID and metadata service",
		Deviations:   []string{"add-ons", "instance metadata", "Entra ID", "Resource Manager"}},
	{Name: "cluster-autoscaler",
		Ran:          "run by hand beside the booted cluster against the stand-ins (its code may not be committed here, so `make test` runs it at zero replicas and replays its recorded calls)",
		NeverOnAzure: "a scale set on Azure",
		Deviations:   []string{"add-ons", "Entra ID", "Resource Manager"}},
}

// markdownStatus is the README's status table; page is the deviations page, relative to it.
func markdownStatus(page string) string {
	var b strings.Builder
	b.WriteString("| part | has run for real | never run against Azure | differs from Azure in |\n|---|---|---|---|\n")
	for _, p := range Status {
		differs := "nothing: it calls no Azure service"
		if len(p.Deviations) > 0 {
			differs = fmt.Sprintf("[%s](%s)", strings.Join(p.Deviations, ", "), page)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", p.Name, p.Ran, p.NeverOnAzure, differs)
	}
	return b.String()
}
