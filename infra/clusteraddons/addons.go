// Package clusteraddons registers the cluster add-ons (components/addons) with pulumi-kubernetes, through
// a provider pointed at the new cluster. The objects themselves are defined once, in addons; this
// package only maps each to a Pulumi resource of its own Kubernetes type.
package clusteraddons

import (
	"fmt"
	"strings"
	"time"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// AddonsArgs configures NewAddons.
type AddonsArgs struct {
	Cluster *spec.Cluster
	// Kubeconfig is the new cluster's admin kubeconfig (secret).
	Kubeconfig pulumi.StringInput
	// SubscriptionID, TenantID and ClientIDs (by addons.AzureWorkloads name) fill the workloads'
	// Azure identities and cluster-autoscaler's cloud config.
	SubscriptionID pulumi.StringInput
	TenantID       pulumi.StringInput
	ClientIDs      map[string]pulumi.StringOutput
	// BootstrapToken (secret) and BootstrapTokenExpires fill the workers' join token Secret.
	BootstrapToken        pulumi.StringInput
	BootstrapTokenExpires time.Time
	// PKI is the cluster's pki.Bundle (secret): the ops webhooks' serving pair and the cluster CA
	// their configurations trust.
	PKI pulumi.AnyOutput
}

// Addons is every add-on object of the cluster, registered through its own provider.
type Addons struct {
	pulumi.ResourceState

	// Objects are the registered objects' keys, "<kind>/<namespace>/<name>".
	Objects pulumi.StringArrayOutput
}

// Resource is one add-on object as Pulumi registers it.
type Resource struct {
	// Type is pulumi-kubernetes' type token, e.g. "kubernetes:apps/v1:Deployment".
	Type string
	// Name is the Pulumi resource name, "<component>-<kind>-[<namespace>-]<name>".
	Name string
	// Args are the object's fields: apiVersion, kind, metadata and the rest.
	Args kubernetes.UntypedArgs
	// First marks namespaces and CRDs: every other object depends on them.
	First bool
}

// Resources maps the objects onto Pulumi resources; a pure function, so it can be table-tested.
func Resources(component string, objs []addons.Object) ([]Resource, error) {
	var out []Resource
	for _, o := range objs {
		u, err := addons.Unstructured(o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", addons.Key(o), err)
		}
		gvk := u.GroupVersionKind()
		name := component + "-" + strings.ToLower(gvk.Kind)
		if u.GetNamespace() != "" {
			name += "-" + u.GetNamespace()
		}
		name += "-" + strings.ReplaceAll(u.GetName(), ":", "-")
		_, isNamespace := o.(*corev1.Namespace)
		_, isCRD := o.(*apiextensionsv1.CustomResourceDefinition)
		out = append(out, Resource{Type: TypeToken(gvk), Name: name, Args: kubernetes.UntypedArgs(u.Object), First: isNamespace || isCRD})
	}
	return out, nil
}

// joinToken is the join token Secret's resource: its name and values come from the token, a
// secret known at deploy time; its resource name stays the same across monthly rotations.
func joinToken(component string, args *AddonsArgs) (Resource, error) {
	const placeholder = "000000.0000000000000000"
	shape, err := addons.BootstrapTokenSecret(placeholder, args.BootstrapTokenExpires)
	if err != nil {
		return Resource{}, err
	}
	rs, err := Resources(component, []addons.Object{shape})
	if err != nil {
		return Resource{}, err
	}
	r := rs[0]
	r.Name = component + "-secret-" + addons.SystemNamespace + "-bootstrap-token"
	secret := args.BootstrapToken.ToStringOutput().ApplyT(func(token string) (*corev1.Secret, error) {
		return addons.BootstrapTokenSecret(token, args.BootstrapTokenExpires)
	})
	// The token id, in the Secret's name, is public by design; only the secret half is secret.
	r.Args["metadata"] = pulumi.Unsecret(secret.ApplyT(func(s any) map[string]any {
		u, _ := addons.Unstructured(s.(*corev1.Secret))
		return u.Object["metadata"].(map[string]any)
	}))
	r.Args["stringData"] = pulumi.ToSecret(secret.ApplyT(func(s any) map[string]string { return s.(*corev1.Secret).StringData })).(pulumi.StringMapOutput)
	return r, nil
}

// trustClusterCA fills the webhook configurations' caBundle with the cluster CA: their "webhooks"
// become an output of the PKI (the CA certificate is public, so not a secret).
func trustClusterCA(resources []Resource, objs []addons.Object, bundle pulumi.AnyOutput) {
	for i, o := range objs {
		switch o.(type) {
		case *admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration:
		default:
			continue
		}
		trusting := o.DeepCopyObject().(addons.Object)
		resources[i].Args["webhooks"] = pulumi.Unsecret(bundle.ApplyT(func(v any) (any, error) {
			addons.TrustCA([]addons.Object{trusting}, v.(pki.Bundle).Pair(pki.ClusterCA).CertPEM)
			u, err := addons.Unstructured(trusting)
			if err != nil {
				return nil, err
			}
			return u.Object["webhooks"], nil
		}))
	}
}

// TypeToken is pulumi-kubernetes' token of a kind: the core group is spelled "core".
func TypeToken(gvk schema.GroupVersionKind) string {
	group := gvk.Group
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("kubernetes:%s/%s:%s", group, gvk.Version, gvk.Kind)
}

// NewAddons registers every add-on object of the cluster, plus what is known only at deploy time:
// cluster-autoscaler's cloud config, the ops webhooks' serving pair and the CA their
// configurations trust, and the workers' join token.
func NewAddons(ctx *pulumi.Context, name string, args *AddonsArgs, opts ...pulumi.ResourceOption) (*Addons, error) {
	comp := &Addons{}
	if err := ctx.RegisterComponentResource("clusterforge:kube:Addons", name, comp, opts...); err != nil {
		return nil, err
	}
	c := args.Cluster
	provider, err := kubernetes.NewProvider(ctx, name+"-provider", &kubernetes.ProviderArgs{
		Kubeconfig:            args.Kubeconfig,
		EnableServerSideApply: pulumi.Bool(true),
	}, pulumi.Parent(comp))
	if err != nil {
		return nil, err
	}
	objs, err := addons.Objects(c)
	if err != nil {
		return nil, err
	}
	azureShapes, err := addons.AzureObjects(c, addons.Azure{}) // their shape; the values follow
	if err != nil {
		return nil, err
	}
	opsTLS, err := addons.OpsTLS("", "", "") // its shape; the values follow
	if err != nil {
		return nil, err
	}
	objs = append(append(objs, azureShapes...), opsTLS)
	resources, err := Resources(name, objs)
	if err != nil {
		return nil, err
	}
	fillAzure(resources[len(resources)-1-len(azureShapes):len(resources)-1], c, args)
	resources[len(resources)-1].Args["stringData"] = pulumi.ToSecret(args.PKI.ApplyT(func(v any) (map[string]string, error) {
		b := v.(pki.Bundle)
		pair := b.Pair(pki.OpsWebhook)
		s, err := addons.OpsTLS(pair.CertPEM, pair.KeyPEM, b.Pair(pki.WebhookClientCA).CertPEM)
		if err != nil {
			return nil, err
		}
		return s.StringData, nil
	})).(pulumi.StringMapOutput)
	trustClusterCA(resources, objs, args.PKI)
	token, err := joinToken(name, args)
	if err != nil {
		return nil, err
	}

	var first []pulumi.Resource
	keys := pulumi.StringArray{}
	for i, r := range resources {
		resOpts := []pulumi.ResourceOption{pulumi.Parent(comp), pulumi.Provider(provider)}
		if !r.First {
			resOpts = append(resOpts, pulumi.DependsOn(first))
		}
		var res apiextensions.CustomResource
		if err := ctx.RegisterResource(r.Type, r.Name, r.Args, &res, resOpts...); err != nil {
			return nil, err
		}
		if r.First {
			first = append(first, &res)
		}
		keys = append(keys, pulumi.String(addons.Key(objs[i])))
	}
	// A rotated token's Secret stays behind until it expires, for instances booted from the old
	// scale-set model; the tokencleaner controller deletes it then.
	if err := ctx.RegisterResource(token.Type, token.Name, token.Args, &apiextensions.CustomResource{},
		pulumi.Parent(comp), pulumi.Provider(provider), pulumi.DependsOn(first), pulumi.RetainOnDelete(true)); err != nil {
		return nil, err
	}
	keys = append(keys, pulumi.String("Secret/"+addons.SystemNamespace+"/bootstrap-token"))
	comp.Objects = keys.ToStringArrayOutput()
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"objects": comp.Objects}); err != nil {
		return nil, err
	}
	return comp, nil
}

// fillAzure sets the data of the Azure objects' resources (addons.AzureObjects, in order) from
// the deploy-time values; the cloud is azurecloud.Public.
func fillAzure(resources []Resource, c *spec.Cluster, args *AddonsArgs) {
	inputs := []any{args.SubscriptionID, args.TenantID}
	for _, w := range addons.AzureWorkloads {
		inputs = append(inputs, args.ClientIDs[w])
	}
	for i := range resources {
		field := "data"
		if resources[i].Type == "kubernetes:core/v1:Secret" {
			field = "stringData"
		}
		resources[i].Args[field] = pulumi.All(inputs...).ApplyT(func(v []any) (map[string]string, error) {
			a := addons.Azure{SubscriptionID: v[0].(string), TenantID: v[1].(string), Cloud: azurecloud.Public, ClientIDs: map[string]string{}}
			for j, w := range addons.AzureWorkloads {
				a.ClientIDs[w] = v[2+j].(string)
			}
			objs, err := addons.AzureObjects(c, a)
			if err != nil {
				return nil, err
			}
			switch o := objs[i].(type) {
			case *corev1.Secret:
				return o.StringData, nil
			case *corev1.ConfigMap:
				return o.Data, nil
			}
			return nil, fmt.Errorf("%s: no data", resources[i].Name)
		}).(pulumi.StringMapOutput)
	}
}
