package nspawn

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// Where the pods with an Azure identity find the stand-in's certificate.
const (
	entraCAConfigMap = "entra-standin-ca"
	entraCADir       = "/etc/clusterforge-standin"
)

// AuthorityHost is where the workloads' Azure SDKs sign in: Entra ID's public host, which Azure
// DNS's stand-in resolves to Entra ID's stand-in (deviation "Entra ID").
func (b *Booted) AuthorityHost() string { return azurecloud.Public.AuthorityHost }

func (b *Booted) entraDir() string { return filepath.Join(b.Dir, "entra") }

// The stand-in's serving pair, which Resource Manager's stand-in serves too.
func (b *Booted) entraCert() string { return filepath.Join(b.entraDir(), "tls.crt") }
func (b *Booted) entraKey() string  { return filepath.Join(b.entraDir(), "tls.key") }

// EntraExchangesFile holds every token exchange the stand-in answered, one JSON line each.
func (b *Booted) EntraExchangesFile() string { return filepath.Join(b.entraDir(), "exchanges.jsonl") }

// EntraExchanges are the exchanges the stand-in answered so far.
func (b *Booted) EntraExchanges() ([]entra.Exchange, error) {
	return standin.Lines[entra.Exchange](b.EntraExchangesFile())
}

// entraSigningKey is the key Entra ID's stand-in signs access tokens with, which Resource
// Manager's verifies them with.
func (b *Booted) entraSigningKey() string { return filepath.Join(b.entraDir(), "token-key.pem") }

// startEntra writes the stand-in's serving pair, the federated credentials and the issuer's
// documents as the Pulumi program publishes them, and starts it.
func (b *Booted) startEntra() error {
	dir := b.entraDir()
	certPEM, keyPEM, err := standin.SelfSigned(hostOf(azurecloud.Public.AuthorityHost), hostOf(azurecloud.Public.ResourceManagerEndpoint))
	if err != nil {
		return err
	}
	if err := entra.WriteIssuerDocuments(filepath.Join(dir, "issuer"), b.Cluster.ServiceAccountIssuer(), b.Bundle.Pair(pki.ServiceAccountKey).CertPEM); err != nil {
		return err
	}
	federations, err := json.MarshalIndent(machines.RehearsalFederations(b.Cluster), "", "  ")
	if err != nil {
		return err
	}
	for file, content := range map[string]string{b.entraCert(): certPEM, b.entraKey(): keyPEM, filepath.Join(dir, "federations.json"): string(federations)} {
		if err := machines.WriteFile(file, content, 0o600); err != nil {
			return err
		}
	}
	if err := entra.WriteSigningKey(b.entraSigningKey()); err != nil {
		return err
	}
	if err := removeRecords(b.EntraExchangesFile(), filepath.Join(dir, WireFile)); err != nil {
		return err
	}
	return b.startService("entra", append(slices.Clone(b.Self), "entra", "--listen="+net.JoinHostPort(entraAddr.String(), "443"),
		"--cert="+b.entraCert(), "--key="+b.entraKey(), "--tenant="+machines.RehearsalTenantID,
		"--federations="+filepath.Join(dir, "federations.json"), "--issuer="+b.Cluster.ServiceAccountIssuer(),
		"--issuer-documents="+filepath.Join(dir, "issuer"), "--exchanges="+b.EntraExchangesFile(), "--signing-key="+b.entraSigningKey(),
		"--wire="+filepath.Join(dir, WireFile)))
}

// trustEntra has every pod with an Azure identity trust the stand-in's certificate (Resource
// Manager's stand-in serves it too) through the entraCA ConfigMap in SSL_CERT_FILE (the binaries'
// built-in public roots do not hold it).
func (b *Booted) trustEntra(objs []addons.Object) {
	for _, o := range objs {
		if t := addons.PodTemplate(o); t != nil && addons.HasAzureIdentity(&t.Spec) {
			p := &t.Spec
			p.Volumes = append(p.Volumes, corev1.Volume{Name: entraCAConfigMap, VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: entraCAConfigMap}}}})
			ct := &p.Containers[0]
			ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: entraCAConfigMap, MountPath: entraCADir, ReadOnly: true})
			ct.Env = append(ct.Env, corev1.EnvVar{Name: "SSL_CERT_FILE", Value: entraCADir + "/ca.crt"})
		}
	}
}

// entraCA is the ConfigMap of the stand-in's certificate, which the boot applies itself: it is the
// stand-ins', no add-on.
func (b *Booted) entraCA() (*corev1.ConfigMap, error) {
	cert, err := os.ReadFile(b.entraCert())
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: addons.SystemNamespace, Name: entraCAConfigMap},
		Data:       map[string]string{"ca.crt": string(cert)},
	}, err
}

// hostOf is the host of an endpoint such as https://management.azure.com/.
func hostOf(endpoint string) string {
	return strings.TrimSuffix(strings.TrimPrefix(endpoint, "https://"), "/")
}
