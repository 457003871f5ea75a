package rehearsal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/pki"
)

// AddonsMachine is where endpoints.json lists the add-on processes the rehearsal runs itself.
const AddonsMachine = "add-ons"

// FieldManager owns the fields clusterforge applies, as the Pulumi program's provider would.
const FieldManager = "clusterforge"

// Apply server-side applies the add-on objects in order, as the Pulumi program registers them.
// After a CRD it waits until the CRD is established, so the objects after it can use it.
func (p *Layout) Apply(ctx context.Context, objs ...addons.Object) error {
	cfg, err := p.RESTConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cs, err := p.Clientset()
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
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
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptrTo(true), FieldValidation: "Strict"}); err != nil {
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

func waitEstablished(ctx context.Context, crds dynamic.ResourceInterface, name string) error {
	return poll(ctx, time.Minute, "CRD "+name+" established", func(ctx context.Context) error {
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

// StartPodGroupController runs the pinned scheduler-plugins controller as its add-on's service
// account, with a token from the TokenRequest API, so the add-on's RBAC is what it runs with
// (deviation "add-ons": its Deployment's pod is a KWOK pod here). Apply the add-ons first.
func (r *Rehearsal) StartPodGroupController(ctx context.Context) error {
	cs, err := r.Clientset()
	if err != nil {
		return err
	}
	token, err := cs.CoreV1().ServiceAccounts(addons.SystemNamespace).CreateToken(ctx, addons.PodGroupControllerName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(24 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of %s: %w", addons.PodGroupControllerName, err)
	}
	kubeconfig := filepath.Join(r.Dir, addons.PodGroupControllerName+".kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rehearsal"] = &clientcmdapi.Cluster{Server: r.Cluster.APIServerURL(), CertificateAuthority: r.PKIFile(pki.ClusterCA, "crt")}
	cfg.AuthInfos[addons.PodGroupControllerName] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	cfg.Contexts["rehearsal"] = &clientcmdapi.Context{Cluster: "rehearsal", AuthInfo: addons.PodGroupControllerName}
	cfg.CurrentContext = "rehearsal"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return err
	}
	argv := append([]string{filepath.Join(r.Tools, addons.PodGroupControllerName), "--kubeconfig=" + kubeconfig,
		"--metricsAddr=0", "--probeAddr=0"}, addons.PodGroupControllerFlags(r.Cluster)...) // "0": no listeners on the shared loopback
	proc, err := start(argv, os.Environ(), r.Dir, filepath.Join(r.Dir, "logs", addons.PodGroupControllerName+".log"))
	if err != nil {
		return err
	}
	proc.Role, proc.Machine, proc.Name = "add-ons", AddonsMachine, addons.PodGroupControllerName
	return r.track(proc)
}

func ptrTo[T any](v T) *T { return &v }
