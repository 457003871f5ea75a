package azurecloud

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The public cloud's environment file, as the add-ons write it, reads back whole, with the
// endpoints the Azure SDK's Resource Manager clients use.
func TestPublicCloudReadsBack(t *testing.T) {
	data, err := json.Marshal(Public)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "environment.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if got != Public || got.ResourceManagerEndpoint != "https://management.azure.com" || got.Scope() != "https://management.core.windows.net//.default" {
		t.Errorf("read %+v (scope %s), want Azure's public endpoints", got, got.Scope())
	}
	if err := os.WriteFile(file, []byte(`{"name":"AzureStackCloud","resourceManagerEndpoint":"http://10.0.0.1/","activeDirectoryEndpoint":"https://login/","tokenAudience":"https://m/"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(file); err == nil {
		t.Error("a Resource Manager endpoint over plain HTTP was read")
	}
}
