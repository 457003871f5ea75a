package offline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two production stacks that each plan within Azure's limits, on one hub: together their VNets
// peered with it pass the hub's peered group, and the plan is refused naming both; with one of
// them peering only its control plane's VNet with the hub, both fit.
func TestStacksSharingAHubCountInItsPeeredGroup(t *testing.T) {
	read := func(stack string) string {
		data, err := os.ReadFile(stackFile(stack))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	big, other := read("prod-10k"), read("prod-7500")
	const otherHub, sharedHub = "resourceGroups/network-hub-7500/", "resourceGroups/network-hub-10k/"
	if !strings.Contains(other, otherHub) || !strings.Contains(big, sharedHub) {
		t.Fatalf("the stacks no longer name the hubs %s and %s", otherHub, sharedHub)
	}
	shared := strings.Replace(other, otherHub, sharedHub, 1)
	for _, tc := range []struct {
		name, other, refusal string
	}{
		{"own hubs", other, ""},
		{"one hub", shared, "network.hub.vnetId: the hub network-hub-10k/hub: its addresses in use and the VNets of cf-10k, cf-7500 peered with it"},
		{"one hub, one cluster's workers not peered with it", strings.Replace(shared, "addressesInUse: 1000", "addressesInUse: 1000\n        reachWorkers: false", 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range map[string]string{"Pulumi.prod-10k.yaml": big, "Pulumi.prod-7500.yaml": tc.other} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Run("prod-10k", filepath.Join(dir, "Pulumi.prod-10k.yaml"), nil)
			if tc.refusal == "" {
				if err != nil {
					t.Fatal(err)
				}
				if r.HubGroup.Over() || r.HubGroup.Use == 0 {
					t.Errorf("the hub's group: %d of %d", r.HubGroup.Use, r.HubGroup.Limit.Value)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("got %v, want a refusal containing %q", err, tc.refusal)
			}
		})
	}
}
