package machine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// On NVSwitch sizes the real systemd starts NVIDIA's fabric manager with the kubelet, before it;
// other sizes render no drop-in.
func TestFabricManagerComesBeforeTheKubeletOnNVSwitchSizes(t *testing.T) {
	for size, want := range map[string]bool{"Standard_ND96isr_H100_v5": true, "Standard_NC24ads_A100_v4": false, "Standard_D16ds_v5": false} {
		c := testCluster(t)
		c.Pools[0].VMSize = size
		m := renderAll(t, c)[len(c.Roles())-1]
		dir := readableDir(t)
		dropIns := 0
		for _, f := range append(m.UnitFiles(), m.Files...) {
			if rel, ok := strings.CutPrefix(f.Path, UnitDir+"/"); ok {
				if strings.HasPrefix(rel, "kubelet.service.d/") {
					dropIns++
				}
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, rel), []byte(f.Content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := (dropIns == 1); got != want {
			t.Errorf("%s: %d kubelet drop-ins, want the fabric manager's: %v", size, dropIns, want)
		}
		dump := systemdLoad(t, dir, "kubelet.service").dump
		for _, dep := range []string{"Wants", "After"} {
			if got := strings.Contains(dump, "\t"+dep+": "+FabricManagerUnit+" "); got != want {
				t.Errorf("%s: systemd's kubelet.service %s %s: %v, want %v", size, dep, FabricManagerUnit, got, want)
			}
		}
	}
}
