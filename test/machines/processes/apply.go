package processes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/test/machines"
)

// StartPodGroupController runs the pinned scheduler-plugins controller as its add-on's service
// account, with a token from the TokenRequest API, so the add-on's RBAC is what it runs with
// (deviation "add-ons": its Deployment's pod is a KWOK pod here). Apply the add-ons first.
func (r *Rehearsal) StartPodGroupController(ctx context.Context) error {
	cs, err := r.Clientset()
	if err != nil {
		return err
	}
	token, err := cs.CoreV1().ServiceAccounts(addons.SystemNamespace).CreateToken(ctx, addons.PodGroupControllerName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))}}, metav1.CreateOptions{})
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
	proc, err := machines.StartProcess(argv, os.Environ(), r.Dir, filepath.Join(r.LogDir(), addons.PodGroupControllerName+".log"))
	if err != nil {
		return err
	}
	proc.Role, proc.Machine, proc.Name = "add-ons", machines.AddonsMachine, addons.PodGroupControllerName
	return r.track(proc)
}
