package controlplane_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
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
func TestPublishedIssuerIsTheAPIServers(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	cs := framework.Clientset(t)
	c := framework.Running.Cluster
	discovery, keys, err := pki.IssuerDocuments(c.ServiceAccountIssuer(), framework.Running.Bundle.Pair(pki.ServiceAccountKey).CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	docs := t.TempDir()
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
		if err := machines.WriteFile(filepath.Join(docs, path), string(published), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// clusterforge-ops's service account, as the add-ons define it, whether or not TestAddons ran.
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

	azure := machines.RehearsalAzure("")
	var federations []entra.Federation
	for _, w := range addons.AzureWorkloads {
		federations = append(federations, entra.Federation{ClientID: azure.ClientIDs[w], Issuer: c.ServiceAccountIssuer(),
			Subject: addons.FederatedSubject(w), Audience: addons.AzureTokenAudience})
	}
	srv := httptest.NewTLSServer(&entra.Server{Tenant: azure.TenantID, Federations: federations, Now: time.Now,
		IssuerDocument: entra.DocumentsFrom(c.ServiceAccountIssuer(), docs), Record: func(entra.Exchange) {}})
	defer srv.Close()
	exchange := func(namespace, serviceAccount string) error {
		expiry := int64(3600)
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{addons.AzureTokenAudience}, ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
			return err
		}
		cred, err := azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{
			ClientID: azure.ClientIDs[wellknown.OpsName], TenantID: azure.TenantID, TokenFilePath: file, DisableInstanceDiscovery: true,
			ClientOptions: policy.ClientOptions{Transport: srv.Client(), Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: srv.URL + "/"}},
		})
		if err != nil {
			return err
		}
		_, err = cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{"https://management.azure.com/.default"}})
		return err
	}
	if err := exchange(addons.SystemNamespace, wellknown.OpsName); err != nil {
		t.Errorf("clusterforge-ops's token gets no Azure token: %v", err)
	}
	if err := exchange("default", "default"); err == nil {
		t.Error("another service account's token got clusterforge-ops's Azure token")
	}
}
