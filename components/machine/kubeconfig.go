package machine

import (
	"encoding/base64"
	"fmt"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Kubeconfig renders a kubeconfig that points at server and authenticates with files on disk.
func Kubeconfig(server, caFile, certFile, keyFile string) string {
	return kubeconfig(server, caFile, "user", "client-certificate: "+certFile+"\n    client-key: "+keyFile)
}

// kubeconfig renders a single-context kubeconfig; credentials are the user's fields, already indented.
func kubeconfig(server, caFile, userName, credentials string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    %s
contexts:
- name: default
  context:
    cluster: cluster
    user: %s
current-context: default
`, yamlString(server), yamlString(caFile), userName, credentials, userName)
}

// localAPIServer is how components on an apiserver machine reach their own apiserver.
var localAPIServer = fmt.Sprintf("https://127.0.0.1:%d", wellknown.APIServerPort)

// EmbeddedKubeconfig is a self-contained kubeconfig (certificates inline), for handing to users.
func EmbeddedKubeconfig(clusterName, server, caPEM, certPEM, keyPEM string) string {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: %[3]s
users:
- name: %[6]s
  user:
    client-certificate-data: %[4]s
    client-key-data: %[5]s
contexts:
- name: %[1]s
  context:
    cluster: %[1]s
    user: %[6]s
current-context: %[1]s
`, yamlString(clusterName), yamlString(server), b64(caPEM), b64(certPEM), b64(keyPEM),
		yamlString(clusterName+"-admin"))
}
