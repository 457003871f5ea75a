package offline

import (
	"encoding/base64"
	"fmt"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Resource is one registered resource as `make plan` reports it.
type Resource struct {
	Type   string `json:"type"`
	Name   string `json:"name"`
	Parent string `json:"parent"`
	// Provider names the explicit provider the resource is managed by, if any.
	Provider string `json:"provider,omitempty"`
	// RetainOnDelete: Pulumi leaves the real object in place when the resource goes.
	RetainOnDelete bool `json:"retainOnDelete,omitempty"`
	// Protect: Pulumi refuses to delete or replace it.
	Protect bool `json:"protect,omitempty"`
	// IgnoreChanges are the properties Pulumi leaves as they are on an update.
	IgnoreChanges []string `json:"ignoreChanges,omitempty"`
	// DeleteBeforeReplace: a replacement is created only once the old one is deleted.
	DeleteBeforeReplace bool `json:"deleteBeforeReplace,omitempty"`
	// SecretOutputs are the outputs the engine keeps encrypted in the state.
	SecretOutputs []string `json:"secretOutputs,omitempty"`
	// URN is the resource's URN in the stack, as the engine would form it.
	URN    string         `json:"urn"`
	Inputs map[string]any `json:"inputs"`
}

// mockSubscription is the subscription id every mocked Azure resource id lives in.
const mockSubscription = "/subscriptions/00000000-0000-0000-0000-000000000000"

// mockTenant is the Entra ID tenant of every mock identity.
const mockTenant = "33333333-3333-3333-3333-333333333333"

// recorder is a pulumi.MockResourceMonitor that answers like the providers would (ids, key and
// certificate PEMs, principal ids: deterministic stand-ins) and records every registration.
type recorder struct {
	mu        sync.Mutex
	resources []Resource
	// userData maps a machine role to its decoded customData.
	userData map[string]string
	// kubeconfigs maps each Kubernetes provider to its (secret) kubeconfig.
	kubeconfigs map[string]string
	// bundle, when set, is the real PKI the TLS and random resources answer with, so the
	// user-data and kubeconfigs work; otherwise they hold placeholder PEMs.
	bundle *pki.Bundle
	// references are the outputs every stack reference reads: the infrastructure's own last
	// appliedSpec, the services' handoff from the infrastructure.
	references resource.PropertyMap
	// project and stack spell the URNs.
	project, stack string
	errs           []error
	// gallery answers the reads of gallery image versions.
	gallery Gallery
}

func newRecorder(bundle *pki.Bundle) *recorder {
	return &recorder{userData: map[string]string{}, kubeconfigs: map[string]string{}, bundle: bundle}
}

func (r *recorder) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if args.TypeToken == "pulumi:pulumi:StackReference" {
		return args.ID, resource.PropertyMap{"name": resource.NewProperty(args.ID), "outputs": resource.NewProperty(r.references)}, nil
	}
	res := Resource{Type: args.TypeToken, Name: args.Name, Provider: providerName(args.Provider), Inputs: redact(args.Inputs)}
	if rpc := args.RegisterRPC; rpc != nil {
		res.Parent, res.RetainOnDelete, res.Protect, res.IgnoreChanges = urnName(rpc.GetParent()), rpc.GetRetainOnDelete(), rpc.GetProtect(), rpc.GetIgnoreChanges()
		res.DeleteBeforeReplace, res.SecretOutputs = rpc.GetDeleteBeforeReplace(), rpc.GetAdditionalSecretOutputs()
		var parentType tokens.Type
		if parent := resource.URN(rpc.GetParent()); parent != "" && parent.Type() != "pulumi:pulumi:Stack" {
			parentType = parent.QualifiedType()
		}
		res.URN = string(resource.NewURN(tokens.QName(r.stack), tokens.PackageName(r.project), parentType, tokens.Type(args.TypeToken), args.Name))
	}
	r.resources = append(r.resources, res)
	r.captureUserData(args.Inputs)
	if kubeconfig := lookup(args.Inputs, "kubeconfig"); args.TypeToken == "pulumi:providers:kubernetes" && kubeconfig.IsString() {
		r.kubeconfigs[args.Name] = kubeconfig.StringValue()
	}

	state := args.Inputs.Copy()
	rg := "rg"
	if v, ok := args.Inputs["resourceGroupName"]; ok && v.IsString() {
		rg = v.StringValue()
	}
	id := fmt.Sprintf("%s/resourceGroups/%s/providers/%s/%s", mockSubscription, rg, args.TypeToken, args.Name)
	set := func(key, value string) { state[resource.PropertyKey(key)] = resource.NewProperty(value) }
	switch args.TypeToken {
	case "azure-native:resources:ResourceGroup":
		id = fmt.Sprintf("%s/resourceGroups/%s", mockSubscription, rg)
		set("name", rg)
	case "azure-native:network:VirtualNetwork":
		set("name", args.Name)
	case "azure-native:storage:StorageAccount": // resources named in Azure answer with that name
		set("name", args.Inputs["accountName"].StringValue())
	case "azure-native:network:PrivateZone":
		set("name", args.Inputs["privateZoneName"].StringValue())
	case "azure-native:network:PrivateEndpoint":
		set("name", args.Inputs["privateEndpointName"].StringValue())
	case "azure-native:managedidentity:UserAssignedIdentity":
		set("principalId", "principal-"+args.Name)
		set("clientId", "client-"+args.Name)
		set("tenantId", mockTenant)
		set("name", args.Name)
	case "tls:index/privateKey:PrivateKey":
		set("privateKeyPem", pem("PRIVATE KEY", args.Name))
		set("publicKeyPem", pem("PUBLIC KEY", args.Name))
		set("privateKeyOpenssh", pem("OPENSSH PRIVATE KEY", args.Name))
		set("publicKeyOpenssh", "ssh-rsa MOCK "+args.Name)
		if args.Inputs["algorithm"].StringValue() == "RSA" {
			set("publicKeyPem", mockRSAPublicKey)
		}
		if pair, ok := r.pair(res.Parent, args.Name, "-key"); ok {
			set("privateKeyPem", pair.KeyPEM)
			if strings.HasPrefix(pair.CertPEM, "-----BEGIN PUBLIC KEY") {
				set("publicKeyPem", pair.CertPEM)
			}
		}
	case "tls:index/certRequest:CertRequest":
		set("certRequestPem", pem("CERTIFICATE REQUEST", args.Name))
	case "tls:index/selfSignedCert:SelfSignedCert", "tls:index/locallySignedCert:LocallySignedCert":
		set("certPem", pem("CERTIFICATE", args.Name))
		if pair, ok := r.pair(res.Parent, args.Name, ""); ok {
			set("certPem", pair.CertPEM)
		}
	case "random:index/randomString:RandomString":
		n := int(args.Inputs["length"].NumberValue())
		set("result", strings.Repeat("a", n))
		if r.bundle != nil && args.Name == res.Parent+"-join-seed" {
			set("result", r.bundle.JoinSeed)
		}
	case "random:index/randomBytes:RandomBytes":
		n := int(args.Inputs["length"].NumberValue())
		set("base64", base64.StdEncoding.EncodeToString(make([]byte, n)))
		if r.bundle != nil && args.Name == res.Parent+"-encryption-key" {
			set("base64", r.bundle.EncryptionKey)
		}
	}
	return id, state, nil
}

// pair is the bundle's key pair for a TLS resource of the ClusterPKI component parent, named
// "<parent>-<pair name><suffix>", when the recorder answers with a real PKI.
func (r *recorder) pair(parent, name, suffix string) (pki.KeyPair, bool) {
	if r.bundle == nil {
		return pki.KeyPair{}, false
	}
	rest, ok := strings.CutPrefix(name, parent+"-")
	if !ok {
		return pki.KeyPair{}, false
	}
	rest, ok = strings.CutSuffix(rest, suffix)
	pair, found := r.bundle.Pairs[rest]
	return pair, ok && found
}

func (r *recorder) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	if args.Token != "azure-native:compute:getGalleryImageVersion" {
		return resource.PropertyMap{}, nil
	}
	arg := func(k string) string { return args.Args[resource.PropertyKey(k)].StringValue() }
	for id, tags := range r.gallery {
		if r, err := spec.ParseResourceID(id, "Microsoft.Compute", "galleries", "images", "versions"); err == nil &&
			r.ResourceGroup == arg("resourceGroupName") && r.Names[0] == arg("galleryName") && r.Names[1] == arg("galleryImageName") && r.Names[2] == arg("galleryImageVersionName") {
			values := map[string]any{}
			for k, v := range tags {
				values[k] = v
			}
			return resource.NewPropertyMapFromMap(map[string]any{"id": id, "tags": values}), nil
		}
	}
	return nil, fmt.Errorf("ResourceNotFound: the gallery image version %s/%s/%s was not found", arg("galleryName"), arg("galleryImageName"), arg("galleryImageVersionName"))
}

// captureUserData decodes the customData of a VM or scale set, keyed by its role tag.
func (r *recorder) captureUserData(in resource.PropertyMap) {
	os := lookup(in, "osProfile")
	if profile := lookup(in, "virtualMachineProfile"); profile.IsObject() {
		os = lookup(profile.ObjectValue(), "osProfile")
	}
	if !os.IsObject() {
		return
	}
	data := unsecret(lookup(os.ObjectValue(), "customData"))
	tags := lookup(in, "tags")
	if !tags.IsObject() {
		return
	}
	role := lookup(tags.ObjectValue(), wellknown.TagRole)
	if !data.IsString() || !role.IsString() {
		return
	}
	decoded, err := base64.StdEncoding.DecodeString(data.StringValue())
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("customData of role %s is not base64: %w", role.StringValue(), err))
		return
	}
	r.userData[role.StringValue()] = string(decoded)
}

func lookup(m resource.PropertyMap, key string) resource.PropertyValue {
	if m == nil {
		return resource.PropertyValue{}
	}
	return unsecret(m[resource.PropertyKey(key)])
}

func unsecret(v resource.PropertyValue) resource.PropertyValue {
	if v.IsSecret() {
		return v.SecretValue().Element
	}
	return v
}

// redact turns inputs into plain JSON values with every secret replaced by "[secret]".
func redact(m resource.PropertyMap) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[string(k)] = redactValue(v)
	}
	return out
}

func redactValue(v resource.PropertyValue) any {
	switch {
	case v.IsSecret():
		return "[secret]"
	case v.IsObject():
		return redact(v.ObjectValue())
	case v.IsArray():
		arr := v.ArrayValue()
		out := make([]any, len(arr))
		for i, e := range arr {
			out[i] = redactValue(e)
		}
		return out
	case v.IsComputed() || v.IsOutput():
		return "[unknown]"
	case v.IsNull():
		return nil
	}
	return v.V
}

// mockRSAPublicKey is one real RSA public key (2048 bits) for every mock RSA key, fixed so the
// goldens stay put: the issuer's documents are rendered from it.
const mockRSAPublicKey = `-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAyuwCjUFah01D4f0/d5LL
/urXo4xQmHhko9oLYl+Fytl4V+m7MbHAj7QGHWxv/cjxfaJJJFJsAiHrOxtJVP4R
UJWGr4c4IehJPp6ZAY9tfvNWKl712jG3JcI+q+RkkkRBVuDmnvoIpDoHgxzWocbL
jyQhbfZ3ddOV7DX0D8DOjph6Jmb9U0kMaE2Krpyt85dt9Gv1tTKFy95dvkWN/87x
FnxEJ17MqlyYG7u6wFE0lULVaswQfkC+Cq1URRs5nmVfjAvqXPlN0lYusEVLY61v
EO/U/e/4uJrukTLE/9IyWApjhd16/Jm1BswGm+Yag4d1HNuk81aTaCbt6rWL21/A
7QIDAQAB
-----END PUBLIC KEY-----
`

func pem(kind, name string) string {
	return fmt.Sprintf("-----BEGIN %s-----\nMOCK %s\n-----END %s-----\n", kind, name, kind)
}

// providerName is the name in a provider reference, "<urn>::<id>".
func providerName(ref string) string {
	if i := strings.LastIndex(ref, "::"); i >= 0 {
		return urnName(ref[:i])
	}
	return ""
}

func urnName(urn string) string {
	if i := strings.LastIndex(urn, "::"); i >= 0 {
		return urn[i+2:]
	}
	return urn
}
