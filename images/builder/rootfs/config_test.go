package rootfs

import (
	"strings"
	"testing"
)

func TestPrepareNamesTheBadOption(t *testing.T) {
	for _, tc := range []struct {
		name   string
		raw    map[string]interface{}
		option string
	}{
		{"no output", map[string]interface{}{}, "output:"},
		{"bad suite", map[string]interface{}{"output": "x.tar", "suite": "Bookworm!"}, "suite:"},
		{"bad package", map[string]interface{}{"output": "x.tar", "packages": []string{"systemd", "rm -rf"}}, "packages[1]:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			err := c.Prepare(tc.raw)
			if err == nil || !strings.Contains(err.Error(), tc.option) {
				t.Fatalf("Prepare(%v) = %v; want an error naming %s", tc.raw, err, tc.option)
			}
		})
	}
	var c Config
	if err := c.Prepare(map[string]interface{}{"output": "x.tar", "cache_dir": t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if c.Suite != "bookworm" || c.Mirror != "http://deb.debian.org/debian" || len(c.Packages) != len(DefaultPackages) {
		t.Errorf("defaults not applied: %+v", c)
	}
	if !strings.HasPrefix(c.Output, "/") {
		t.Errorf("output %q is not made absolute", c.Output)
	}
}
