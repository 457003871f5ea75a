package machines

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/addons"
)

// AddonsMachine is where endpoints.json lists the add-on processes the rehearsal runs itself.
const AddonsMachine = "add-ons"

// fieldManager owns the fields clusterforge applies, as the services program's provider would.
const fieldManager = "clusterforge"

// Apply server-side applies the add-on objects in order, as the services program registers them.
// After a CRD it waits until the CRD is established, so the objects after it can use it.
func (p *Layout) Apply(ctx context.Context, objs ...addons.Object) error {
	dyn, mapper, err := p.dynamic()
	if err != nil {
		return err
	}
	for _, o := range objs {
		u, err := addons.Unstructured(o)
		if err != nil {
			return fmt.Errorf("%s: %w", addons.Key(o), err)
		}
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset() // a CRD applied just before
			if mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return fmt.Errorf("%s: %w", addons.Key(o), err)
			}
		}
		data, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		client := dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		if _, err := client.Patch(ctx, u.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true), FieldValidation: "Strict"}); err != nil {
			return fmt.Errorf("server-side apply %s: %w", addons.Key(o), err)
		}
		if _, isCRD := o.(*apiextensionsv1.CustomResourceDefinition); isCRD {
			if err := waitEstablished(ctx, client, u.GetName()); err != nil {
				return err
			}
			mapper.Reset()
		}
	}
	return nil
}

// dynamic is a client for any kind and the mapper from kinds to their resources.
func (p *Layout) dynamic() (*dynamic.DynamicClient, *restmapper.DeferredDiscoveryRESTMapper, error) {
	cfg, err := p.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	cs, err := p.Clientset()
	if err != nil {
		return nil, nil, err
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery())), nil
}

// FieldManagers are the managers of the live object o's fields, as the apiserver records them.
func (p *Layout) FieldManagers(ctx context.Context, o addons.Object) ([]string, error) {
	dyn, mapper, err := p.dynamic()
	if err != nil {
		return nil, err
	}
	gvk := o.GetObjectKind().GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	live, err := dyn.Resource(mapping.Resource).Namespace(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range live.GetManagedFields() {
		out = append(out, f.Manager)
	}
	return out, nil
}

func waitEstablished(ctx context.Context, crds dynamic.ResourceInterface, name string) error {
	return Poll(ctx, time.Minute, "CRD "+name+" established", func(ctx context.Context) error {
		got, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conditions {
			if m, ok := c.(map[string]any); ok && m["type"] == string(apiextensionsv1.Established) && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("not established yet")
	})
}

// ApplyFoundation applies what the control plane needs before it works, as the services program's
// add-ons do from outside the machines: the join RBAC and tokens, the scheduler's CRDs.
func (p *Layout) ApplyFoundation(ctx context.Context) error {
	objs, err := addons.Foundation(p.Cluster)
	if err != nil {
		return err
	}
	tokens, err := addons.JoinTokenSecrets(p.Cluster, p.Bundle.JoinSeed, p.Bundle.BootstrapTokenExpires)
	if err != nil {
		return err
	}
	for _, t := range tokens {
		objs = append(objs, t)
	}
	return p.Apply(ctx, objs...)
}
