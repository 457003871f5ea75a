package machine

import (
	"strings"
	"testing"
)

// Long-running services come back whatever way they ended (a leader loop that returned is as gone
// as one that crashed); etcd alone stays down after a clean exit, which is how a member removed
// from its cluster ends.
func TestServicesRestartAlwaysButEtcd(t *testing.T) {
	seen := 0
	for _, m := range renderAll(t, testCluster(t)) {
		for _, u := range m.Units {
			if !strings.Contains(u.Content, "[Service]") || unitValue(u.Content, "Type") == "oneshot" {
				continue
			}
			restart := unitValue(u.Content, "Restart")
			want := "always"
			if u.Name == EtcdUnit {
				want = "on-failure"
			}
			if restart != want {
				t.Errorf("%s %s: Restart=%s, want %s", m.Role, u.Name, restart, want)
			}
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("no service units rendered")
	}
}

// unitValue is the last value of key in a unit file.
func unitValue(content, key string) string {
	value := ""
	for _, line := range strings.Split(content, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			value = v
		}
	}
	return value
}
