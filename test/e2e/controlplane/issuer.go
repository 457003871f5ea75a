package controlplane

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// What the Pulumi program publishes for Entra ID (pki.IssuerDocuments) is what the real
// kube-apiservers serve as their issuer's discovery document and keys, and a token they sign for
// clusterforge-ops, for Entra's audience, gets an Azure token from Entra's stand-in reading only
// the published documents; a tenant's token does not.
func PublishedIssuerIsTheAPIServers(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	cs := framework.Clientset(t)
	c := framework.Running.Cluster
	discovery, keys, err := pki.IssuerDocuments(c.ServiceAccountIssuer(), framework.Running.Bundle.Pair(pki.ServiceAccountKey).CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	for path, published := range map[string][]byte{pki.IssuerDiscoveryPath: discovery, pki.IssuerKeysPath: keys} {
		served, err := cs.RESTClient().Get().AbsPath("/" + path).DoRaw(ctx)
		if err != nil {
			t.Fatalf("the apiserver's /%s: %v", path, err)
		}
		var want, got any
		if err := json.Unmarshal(published, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(served, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("/%s: the apiserver serves\n%s\nthe Pulumi program publishes\n%s", path, served, published)
		}
	}
	docs := t.TempDir()
	if err := entra.WriteIssuerDocuments(docs, c.ServiceAccountIssuer(), framework.Running.Bundle.Pair(pki.ServiceAccountKey).CertPEM); err != nil {
		t.Fatal(err)
	}

	// clusterforge-ops's service account, as the add-ons define it, whether or not Addons ran.
	objs, err := framework.Running.Addons()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if sa, ok := o.(*corev1.ServiceAccount); ok && sa.Namespace == addons.SystemNamespace && sa.Name == wellknown.OpsName {
			if err := framework.Running.Apply(ctx, sa); err != nil {
				t.Fatal(err)
			}
		}
	}

	srv := httptest.NewTLSServer(&entra.Server{Tenant: machines.RehearsalTenantID, Federations: machines.RehearsalFederations(c), Now: time.Now,
		IssuerDocument: entra.DocumentsFrom(c.ServiceAccountIssuer(), docs), Record: func(entra.Exchange) {}})
	defer srv.Close()
	exchange := func(namespace, serviceAccount string) error {
		expiry := int64(3600)
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{addons.AzureTokenAudience}, ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		_, err = entra.SignIn(ctx, srv.Client(), srv.URL+"/", machines.RehearsalTenantID, machines.RehearsalClientIDs()[wellknown.OpsName], tr.Status.Token)
		return err
	}
	if err := exchange(addons.SystemNamespace, wellknown.OpsName); err != nil {
		t.Errorf("clusterforge-ops's token gets no Azure token: %v", err)
	}
	if err := exchange("default", "default"); err == nil {
		t.Error("another service account's token got clusterforge-ops's Azure token")
	}
}
