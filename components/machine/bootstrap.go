package machine

import (
	"fmt"
	"strings"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// BootstrapManifest is applied by every apiserver machine (idempotently, server-side) once its
// apiserver answers: the kubelet TLS-bootstrap token and the RBAC that lets bootstrapping nodes
// request, and automatically get, client certificates.
const BootstrapManifest = KubeDir + "/bootstrap/cluster-bootstrap.yaml"

// bootstrapGroup is the extra group of the workers' bootstrap token.
const bootstrapGroup = "system:bootstrappers:clusterforge:worker"

func clusterBootstrap(c *spec.Cluster, b pki.Bundle) part {
	id, secret, _ := strings.Cut(b.BootstrapToken, ".")
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-%s
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: clusterforge worker join token for %s
  token-id: %q
  token-secret: %q
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: %s
`, id, c.Name, id, secret, bootstrapGroup)
	for _, rb := range []struct{ name, role, kind, subject string }{
		{"clusterforge:node-bootstrapper", "system:node-bootstrapper", "Group", bootstrapGroup},
		{"clusterforge:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "Group", bootstrapGroup},
		{"clusterforge:node-autoapprove-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "Group", "system:nodes"},
		{"clusterforge:apiserver-kubelet-client", "system:kubelet-api-admin", "User", "kube-apiserver-kubelet-client"},
	} {
		manifest += fmt.Sprintf(`---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: %s
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: %s
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: %s
  name: %s
`, rb.name, rb.role, rb.kind, rb.subject)
	}
	return part{
		files: []File{{Path: BootstrapManifest, Content: manifest, Mode: 0o600}},
		units: []Unit{service{
			name: "clusterforge-bootstrap", description: "clusterforge: apply the kubelet TLS-bootstrap token and RBAC",
			after: []string{apiserverUnitName}, binary: BinDir + "/kubectl", subcommand: "apply", oneshot: true,
			flags: Flags{"kubeconfig": AdminKubeconfig, "server-side": "true", "force-conflicts": "true",
				"field-manager": "clusterforge", "filename": BootstrapManifest},
		}.unit()},
	}
}
