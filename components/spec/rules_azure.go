package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// zonalRegions are the Azure regions with availability zones ("1", "2", "3"), from Azure's list
// of regions with availability zones (learn.microsoft.com/azure/reliability/availability-zones-region-support,
// read 2026-11). clusterforge spreads etcd over zones (L01), so it deploys only to these.
var zonalRegions = []string{
	"australiaeast", "austriaeast", "brazilsouth", "canadacentral", "centralindia", "centralus", "chilecentral",
	"eastasia", "eastus", "eastus2", "francecentral", "germanywestcentral", "indonesiacentral", "israelcentral",
	"italynorth", "japaneast", "japanwest", "koreacentral", "malaysiawest", "mexicocentral", "newzealandnorth",
	"northeurope", "norwayeast", "polandcentral", "qatarcentral", "southafricanorth", "southcentralus",
	"southeastasia", "spaincentral", "swedencentral", "switzerlandnorth", "uaenorth", "uksouth", "westeurope",
	"westus2", "westus3",
}

// regionZones are the zone names of a zonal region.
var regionZones = []string{"1", "2", "3"}

// reservedAdminUsernames are refused by Azure for a VM's admin (the osProfile docs), or are system
// accounts of the Debian image the machines boot.
var reservedAdminUsernames = []string{
	"1", "123", "a", "actuser", "adm", "admin", "admin1", "admin2", "administrator", "aspnet", "backup",
	"console", "david", "guest", "john", "owner", "root", "server", "sql", "support", "support_388945a0",
	"sys", "test", "test1", "test2", "test3", "user", "user1", "user2", "user3", "user4", "user5",
	"bin", "daemon", "games", "irc", "list", "lp", "mail", "man", "messagebus", "news", "nobody", "proxy",
	"sshd", "sync", "systemd-network", "systemd-resolve", "systemd-timesync", "uucp", "www-data", "_apt",
}

// linuxUsername is what useradd accepts and Azure allows: lowercase, at most 32 characters.
var linuxUsername = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// An azureName is the naming rule of one Azure resource type (learn.microsoft.com/azure/
// azure-resource-manager/management/resource-name-rules).
type azureName struct {
	min, max int
	pattern  *regexp.Regexp
	rule     string
}

var azureNames = map[string]azureName{
	"resourceGroups": {1, 90, regexp.MustCompile(`^[A-Za-z0-9_().-]*[A-Za-z0-9_()-]$`),
		"letters, digits, '_', '(', ')', '-' and '.', not ending in '.'"},
	"virtualNetworks": {2, 64, regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`),
		"letters, digits, '_', '.' and '-', starting with a letter or digit, ending with one or '_'"},
	"galleries": {1, 80, regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.]*[A-Za-z0-9])?$`),
		"letters, digits, '_' and '.', starting and ending with a letter or digit"},
	"images": {1, 80, regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`),
		"letters, digits, '_', '-' and '.', starting and ending with a letter or digit"},
	// virtualMachines and virtualMachineScaleSets: the Linux computer name rules, which the
	// machine names double as.
	"storageAccounts": {3, 24, regexp.MustCompile(`^[a-z0-9]+$`), "lowercase letters and digits, unique across Azure"},
	"virtualMachines": {1, 64, regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$`),
		"letters, digits and '-', starting and ending with a letter or digit"},
	"virtualMachineScaleSets": {1, 58, regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$`),
		"letters, digits and '-', starting and ending with a letter or digit (the instances' computer name prefix)"},
	"networkInterfaces": {1, 80, regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`),
		"letters, digits, '_', '.' and '-'"},
	"loadBalancers": {1, 80, regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`),
		"letters, digits, '_', '.' and '-'"},
	"virtualNetworkPeerings": {1, 80, regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`),
		"letters, digits, '_', '.' and '-'"},
}

// validName reports whether name follows the naming rule of an Azure resource type.
func validName(typ, name string) bool {
	r := azureNames[typ]
	return len(name) >= r.min && len(name) <= r.max && r.pattern.MatchString(name)
}

// subscriptionID is a subscription's GUID.
var subscriptionID = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ResourceID is an Azure resource id taken apart segment by segment:
// /subscriptions/<guid>/resourceGroups/<rg>/providers/<Namespace>/<type>/<name>[/<type>/<name>...].
type ResourceID struct {
	Subscription  string
	ResourceGroup string
	Provider      string
	// Types and Names are the resource's type and name segments, outermost first.
	Types, Names []string
}

// ParseResourceID checks every segment of id against ARM's grammar: the keywords, a GUID, and
// for each resource type its naming rule. want is the provider and types the caller expects,
// e.g. "Microsoft.Network", "virtualNetworks".
func ParseResourceID(id, provider string, types ...string) (ResourceID, error) {
	parts := strings.Split(id, "/")
	if len(parts) != 7+2*len(types) || parts[0] != "" {
		return ResourceID{}, fmt.Errorf("has %d segments, want %d", len(parts)-1, 6+2*len(types))
	}
	r := ResourceID{Subscription: parts[2], ResourceGroup: parts[4], Provider: parts[6]}
	switch {
	case parts[1] != "subscriptions":
		return r, fmt.Errorf("does not start with /subscriptions/")
	case !subscriptionID.MatchString(r.Subscription):
		return r, fmt.Errorf("subscription %s is not a GUID", Excerpt(r.Subscription))
	case parts[3] != "resourceGroups":
		return r, fmt.Errorf("segment 3 is %s, want resourceGroups", Excerpt(parts[3]))
	case !validName("resourceGroups", r.ResourceGroup):
		return r, fmt.Errorf("resource group %s breaks Azure's rule: %s", Excerpt(r.ResourceGroup), azureNames["resourceGroups"].rule)
	case parts[5] != "providers":
		return r, fmt.Errorf("segment 5 is %s, want providers", Excerpt(parts[5]))
	case r.Provider != provider:
		return r, fmt.Errorf("provider %s, want %s", Excerpt(r.Provider), provider)
	}
	for i, typ := range types {
		gotType, name := parts[7+2*i], parts[8+2*i]
		if gotType != typ {
			return r, fmt.Errorf("resource type %s, want %s", Excerpt(gotType), typ)
		}
		if typ == "versions" {
			if !galleryVersion(name) {
				return r, fmt.Errorf("version %s is not Major.Minor.Patch of 32-bit integers", Excerpt(name))
			}
		} else if !validName(typ, name) {
			return r, fmt.Errorf("%s name %s breaks Azure's rule: %s", typ, Excerpt(name), azureNames[typ].rule)
		}
		r.Types, r.Names = append(r.Types, gotType), append(r.Names, name)
	}
	return r, nil
}

// galleryVersion is a gallery image version name: three 32-bit integers.
func galleryVersion(v string) bool {
	parts := strings.Split(v, ".")
	for _, p := range parts {
		if n, err := strconv.ParseInt(p, 10, 32); err != nil || n < 0 || p != strconv.FormatInt(n, 10) {
			return false
		}
	}
	return len(parts) == 3
}

// HubVNet parses the hub VNet's id (validated).
func (c *Cluster) HubVNet() ResourceID {
	r, _ := ParseResourceID(c.Network.Hub.VNetID, "Microsoft.Network", "virtualNetworks")
	return r
}

const galleryImageIDForm = "/subscriptions/<guid>/resourceGroups/<rg>/providers/Microsoft.Compute/galleries/<gallery>/images/<image>/versions/<major.minor.patch>"

// galleryImage checks id is a version of the image definition a role boots (definition), as
// the Packer template of that role publishes it: a worker booting the control-plane image would
// have no kubelet, an etcd machine booting a worker image no etcd.
func (v *validator) galleryImage(field, id, definition string) {
	r, err := ParseResourceID(id, "Microsoft.Compute", "galleries", "images", "versions")
	if err != nil {
		v.fail(field, "give the gallery image version id `packer build` published, "+galleryImageIDForm, "%s: %v", Excerpt(id), err)
		return
	}
	if r.Names[1] != definition {
		v.fail(field, fmt.Sprintf("give a version of the image definition %q, which %s publishes", definition, galleryTemplate(definition)),
			"is a version of image %s, not of %s", Excerpt(r.Names[1]), definition)
	}
}

// ImageDefinition is the image definition id a gallery image version id (as validated) is a
// version of.
func ImageDefinition(versionID string) string {
	if i := strings.LastIndex(strings.ToLower(versionID), "/versions/"); i >= 0 {
		return versionID[:i]
	}
	return versionID
}

// WorkerImageDefinitions are the image definitions the worker pools boot versions of, sorted: an
// instance booting any other image was not made from a model this cluster wrote.
func (c *Cluster) WorkerImageDefinitions() []string {
	var defs []string
	for _, p := range c.Pools {
		if d := ImageDefinition(p.Image); !slices.ContainsFunc(defs, func(x string) bool { return strings.EqualFold(x, d) }) {
			defs = append(defs, d)
		}
	}
	slices.Sort(defs)
	return defs
}

// GalleryImage is one image definition a Packer template publishes, and the stack field naming
// the version the cluster boots.
type GalleryImage struct {
	Definition string
	// Field is the stack field (its yaml key); Version reads it.
	Field   string
	Version func(*Cluster) *string
	// Role is the image role (its template: images/<role>.pkr.hcl); Variant the template's build of
	// it, "" when it has one.
	Role, Variant string
}

// Template is the Packer template that publishes g, from the repository's root.
func (g GalleryImage) Template() string { return "images/" + g.Role + ".pkr.hcl" }

// GalleryImages are every image definition the templates publish.
var GalleryImages = []GalleryImage{
	{GalleryImageControlPlane, "controlPlaneImage", func(c *Cluster) *string { return &c.ControlPlaneImage }, "control-plane", ""},
	{GalleryImageWorkerCPU, "image", func(c *Cluster) *string { return &c.Image }, "worker", "cpu"},
	{GalleryImageWorkerGPU, "gpuImage", func(c *Cluster) *string { return &c.GPUImage }, "worker", "gpu"},
}

// galleryTemplate names the template (and variant) that publishes definition.
func galleryTemplate(definition string) string {
	for _, g := range GalleryImages {
		switch {
		case g.Definition != definition:
		case g.Variant == "":
			return g.Template()
		default:
			return fmt.Sprintf("%s (variant %s)", g.Template(), g.Variant)
		}
	}
	return "no template"
}

// validateIdentity checks what names the cluster and its login to Azure.
func (c *Cluster) validateIdentity(v *validator) {
	if !clusterName.MatchString(c.Name) {
		v.fail("name", "use 3 to 20 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit",
			"%s is not a valid cluster name", Excerpt(c.Name))
	}
	if !slices.Contains(zonalRegions, c.Location) {
		v.fail("location", "pick an Azure region with availability zones, e.g. eastus2 (spec.zonalRegions)",
			"%s is not a region clusterforge deploys to", Excerpt(c.Location))
	}
	if len(c.Zones) == 0 {
		v.fail("zones", `list at least one zone, e.g. ["1", "2", "3"]`, "no availability zones")
	}
	seen := map[string]bool{}
	for i, z := range c.Zones {
		field := fmt.Sprintf("zones[%d]", i)
		if !slices.Contains(regionZones, z) {
			v.fail(field, fmt.Sprintf("use the zone names %s has: %s", c.Location, strings.Join(regionZones, ", ")), "%s is not a zone", Excerpt(z))
		} else if seen[z] {
			v.fail(field, "list each zone once", "zone %s is listed twice", z)
		}
		seen[z] = true
	}
	u := c.Admin.Username
	switch {
	case !linuxUsername.MatchString(u):
		v.fail("admin.username", "use 1 to 32 lowercase letters, digits, '_' and '-', starting with a letter or '_'", "%s is not a Linux user name", Excerpt(u))
	case slices.Contains(reservedAdminUsernames, u):
		v.fail("admin.username", "pick a name of your own, e.g. clusteradmin", "%s is reserved by Azure or the image", Excerpt(u))
	}
	c.validateSSHKey(v)
	if _, err := ParseResourceID(c.Network.Hub.VNetID, "Microsoft.Network", "virtualNetworks"); err != nil {
		v.fail("network.hub.vnetId", "give the hub VNet's resource id, /subscriptions/<guid>/resourceGroups/<rg>/providers/Microsoft.Network/virtualNetworks/<name> (L31)",
			"%s: %v", Excerpt(c.Network.Hub.VNetID), err)
	}
	for _, g := range GalleryImages {
		v.galleryImage(g.Field, *g.Version(c), g.Definition)
	}
}

// validateAzureNames checks every name the program gives an Azure resource against that type's
// rule: the cluster and pool name rules imply them, and this keeps them honest.
func (c *Cluster) validateAzureNames(v *validator) {
	check := func(field, typ, name string) {
		if !validName(typ, name) {
			r := azureNames[typ]
			v.fail(field, fmt.Sprintf("shorten or rename it: Azure names a %s with %d to %d of %s", typ, r.min, r.max, r.rule),
				"gives the %s name %s", typ, Excerpt(name))
		}
	}
	check("name", "resourceGroups", c.ResourceGroup())
	check("name", "resourceGroups", c.BirthRegistryResourceGroup())
	check("name", "loadBalancers", c.APIServerName())
	check("name", "virtualNetworkPeerings", c.HubPeeringName())
	for _, w := range c.WorkerVNets() {
		check("name", "virtualNetworkPeerings", c.HubPeeringNameOf(w))
	}
	for _, e := range c.EtcdClusters() {
		for _, m := range e.Members {
			check("name", "virtualMachines", m.Name)
			check("name", "networkInterfaces", m.Name+"-nic")
		}
	}
	check("name", "virtualMachineScaleSets", c.APIServerName())
	check("name", "storageAccounts", c.BackupStorageAccount())
	check("name", "storageAccounts", c.IssuerStorageAccount())
	check("name", "storageAccounts", c.BirthRegistryAccount())
	for _, s := range c.ScaleSets() {
		field := fmt.Sprintf("pools[%d].name", slices.IndexFunc(c.Pools, func(p Pool) bool { return p.Name == s.Pool.Name }))
		check(field, "virtualMachineScaleSets", s.AzureName)
	}
}

// BackupContainer is the blob container of the main etcd's snapshots.
const BackupContainer = "etcd-backups"

// BackupStorageAccount names the storage account of the cluster's etcd snapshots. Storage account
// names are global across Azure: "cf", the cluster name's letters and digits, and a hash of the
// name and region keep two clusters (and two clusters of one name in two regions) apart.
func (c *Cluster) BackupStorageAccount() string { return c.storageAccount("cf", "") }

// The birth registry's containers: one the etcd members add to and cannot change, one only an
// operator writes (BirthRegistryResourceGroup).
const (
	BirthsContainer      = "etcd-births"
	RetirementsContainer = "etcd-retirements"
)

// BirthRegistryResourceGroup holds the evidence that the cluster's etcd ever existed, apart from
// the cluster's own group so that deleting that group, or the backup account in it, does not
// erase the proof that a restore is owed.
func (c *Cluster) BirthRegistryResourceGroup() string { return c.ResourceGroup() + "-births" }

// BirthRegistryAccount names the storage account in BirthRegistryResourceGroup.
func (c *Cluster) BirthRegistryAccount() string { return c.storageAccount("born", "/births") }

// BirthsURL and RetirementsURL are the registry's containers; like BackupStoreURL they resolve
// to the private endpoint in the etcd subnet.
func (c *Cluster) BirthsURL() string { return c.blobURL(c.BirthRegistryAccount(), BirthsContainer) }
func (c *Cluster) RetirementsURL() string {
	return c.blobURL(c.BirthRegistryAccount(), RetirementsContainer)
}

func (c *Cluster) blobURL(account, container string) string {
	return "https://" + account + ".blob.core.windows.net/" + container
}

// IssuerStorageAccount names the storage account whose public container holds the
// service-account issuer's documents (ServiceAccountIssuer).
func (c *Cluster) IssuerStorageAccount() string { return c.storageAccount("oidc", "/issuer") }

// storageAccount is prefix, at most 24-len(prefix)-8 of the name's letters and digits, and a
// hash of the name, region and purpose.
func (c *Cluster) storageAccount(prefix, purpose string) string {
	letters := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return -1
	}, c.Name)
	sum := sha256.Sum256([]byte(c.Name + "/" + c.Location + purpose))
	return prefix + letters[:min(len(letters), 24-len(prefix)-8)] + hex.EncodeToString(sum[:4])
}

// IssuerContainer is the public blob container of the service-account issuer's documents.
const IssuerContainer = "oidc"

// ServiceAccountIssuer is the issuer of the cluster's service-account tokens: a public container
// Entra ID reads the issuer's keys from, to trust the tokens of the control loops' service
// accounts in exchange for Azure tokens (Workload Identity). Its name follows from the cluster's,
// so the apiservers' flags need no deploy-time value.
func (c *Cluster) ServiceAccountIssuer() string {
	return c.blobURL(c.IssuerStorageAccount(), IssuerContainer)
}

// BackupStoreURL is the container's URL; the private endpoint in the etcd subnet makes its name
// resolve to a private address.
func (c *Cluster) BackupStoreURL() string {
	return c.blobURL(c.BackupStorageAccount(), BackupContainer)
}

// HubPeeringName is the name of the hub's peering back to the control plane's VNet.
func (c *Cluster) HubPeeringName() string { return "spoke-" + c.Name }

// HubPeeringNameOf is the hub's peering back to a worker VNet: the underscore, which no cluster
// name holds, keeps it apart from every cluster's HubPeeringName on a shared hub.
func (c *Cluster) HubPeeringNameOf(w WorkerVNet) string {
	return fmt.Sprintf("spoke-%s_%s-%d", c.Name, w.Pool.Name, w.Index)
}
