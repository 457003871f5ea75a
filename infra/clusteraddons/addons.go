// Package clusteraddons registers the cluster add-ons (components/addons) with pulumi-kubernetes, through
// a provider pointed at the cluster: the services program's resources. The objects themselves are defined once, in addons; this
// package only maps each to a Pulumi resource of its own Kubernetes type.
package clusteraddons

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/handoff"
)

// AddonsArgs configures NewAddons.
type AddonsArgs struct {
	Cluster *spec.Cluster
	// Infrastructure is what the infrastructure stack handed over: the admin kubeconfig, the
	// deploy-time values and any patches over the objects.
	Infrastructure handoff.Infrastructure
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

// Resources maps the objects onto Pulumi resources, a Secret's data a Pulumi secret; a pure
// function, so it can be table-tested.
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
		annotations := map[string]string{PatchForceAnnotation: "true"}
		if skipAwait(o) {
			annotations[SkipAwaitAnnotation] = "true"
		}
		u.SetAnnotations(labels.Merge(u.GetAnnotations(), annotations))
		args := kubernetes.UntypedArgs(u.Object)
		if _, isSecret := o.(*corev1.Secret); isSecret {
			for _, field := range []string{"data", "stringData"} {
				if v, ok := args[field]; ok {
					args[field] = pulumi.ToSecret(v)
				}
			}
		}
		out = append(out, Resource{Type: TypeToken(gvk), Name: name, Args: args, First: isNamespace || isCRD})
	}
	return out, nil
}

// pulumi-kubernetes' annotations: SkipAwaitAnnotation creates or updates an object without waiting
// for it to become ready; PatchForceAnnotation applies over fields another manager took, as a hand
// edit does: the stack is the add-ons' source of truth (no controller of ours edits them), so
// `pulumi up` puts back what `preview` showed drifting.
const (
	SkipAwaitAnnotation  = "pulumi.com/skipAwait"
	PatchForceAnnotation = "pulumi.com/patchForce"
)

// skipAwait: what `pulumi up` does not wait for. Balloon pods are pending by design whenever real
// pods preempted them, until the autoscaler adds a node (or forever, a pool at its maxNodes); a
// DaemonSet is ready only when every node is, which on thousands of nodes some never are; a
// Service is ready when its Deployment is, and the provider's wait for it reads Endpoints, which
// EndpointSlices replace (L08). The rest (DNS, Prometheus, the operations layer) must be ready
// for the apply to succeed.
func skipAwait(o addons.Object) bool {
	switch w := o.(type) {
	case *appsv1.DaemonSet, *corev1.Service:
		return true
	case *appsv1.Deployment:
		_, balloon := w.Spec.Template.Labels[addons.BalloonAppLabel]
		return balloon
	}
	return false
}

// TypeToken is pulumi-kubernetes' token of a kind: the core group is spelled "core".
func TypeToken(gvk schema.GroupVersionKind) string {
	group := gvk.Group
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("kubernetes:%s/%s:%s", group, gvk.Version, gvk.Kind)
}

// NewAddons registers every add-on object of the cluster (addons.Deploy, patched as the
// infrastructure asks) and the pools' join tokens, through a provider holding the admin kubeconfig.
// Secrets' data and the kubeconfig are Pulumi secrets, encrypted in the state.
func NewAddons(ctx *pulumi.Context, name string, args *AddonsArgs, opts ...pulumi.ResourceOption) (*Addons, error) {
	comp := &Addons{}
	if err := ctx.RegisterComponentResource("clusterforge:kube:Addons", name, comp, opts...); err != nil {
		return nil, err
	}
	inf := args.Infrastructure
	provider, err := kubernetes.NewProvider(ctx, name+"-provider", &kubernetes.ProviderArgs{
		Kubeconfig:            pulumi.ToSecret(pulumi.String(inf.Kubeconfig)).(pulumi.StringOutput),
		EnableServerSideApply: pulumi.Bool(true),
	}, pulumi.Parent(comp))
	if err != nil {
		return nil, err
	}
	objs, err := addons.Deploy(args.Cluster, inf.Deployed)
	if err != nil {
		return nil, err
	}
	if err := addons.Patch(objs, inf.AddonPatches); err != nil {
		return nil, err
	}
	resources, err := Resources(name, objs)
	if err != nil {
		return nil, err
	}
	tokens, tokenKeys, err := joinTokens(name, args.Cluster, inf.Deployed)
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
	for _, token := range tokens {
		if err := ctx.RegisterResource(token.Type, token.Name, token.Args, &apiextensions.CustomResource{},
			pulumi.Parent(comp), pulumi.Provider(provider), pulumi.DependsOn(first), pulumi.RetainOnDelete(true)); err != nil {
			return nil, err
		}
	}
	for _, k := range tokenKeys {
		keys = append(keys, pulumi.String(k))
	}
	comp.Objects = keys.ToStringArrayOutput()
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"objects": comp.Objects}); err != nil {
		return nil, err
	}
	return comp, nil
}

// joinTokens are the pools' join token Secrets' resources, and their objects' keys: each resource
// named after its pool, so its name stays the same across monthly rotations while the object it
// names changes.
func joinTokens(component string, c *spec.Cluster, d addons.Deployed) ([]Resource, []string, error) {
	secrets, err := addons.JoinTokenSecrets(c, d.JoinSeed, d.BootstrapTokenExpires)
	if err != nil {
		return nil, nil, err
	}
	objs, keys := make([]addons.Object, len(secrets)), make([]string, len(secrets))
	for i, s := range secrets {
		objs[i], keys[i] = s, addons.Key(s)
	}
	rs, err := Resources(component, objs)
	if err != nil {
		return nil, nil, err
	}
	for i := range rs {
		rs[i].Name = component + "-secret-" + addons.SystemNamespace + "-bootstrap-token-" + c.Pools[i].Name
	}
	return rs, keys, nil
}
