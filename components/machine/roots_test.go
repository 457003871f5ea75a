package machine

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// absolutePath finds absolute filesystem paths in rendered text (not URL paths such as /readyz).
var absolutePath = regexp.MustCompile(`(?:^|[\s="'])(/(?:etc|usr|run|var|opt|srv|home)/[^\s"',]*)`)

// Roots must cover every path a machine's files, units, scripts and flags touch: the rehearsal
// re-roots exactly these, so a path outside them would escape its machine.
func TestRootsCoverEveryPath(t *testing.T) {
	machines := renderAll(t, testCluster(t))
	under := func(path string) bool {
		for _, root := range Roots {
			if path == root || strings.HasPrefix(path, root+"/") {
				return true
			}
		}
		return false
	}
	// Host paths the machines read but never write: the OS and the devices etcd-disk probes.
	host := regexp.MustCompile(`^/(dev|proc|sys|bin|sbin|usr/bin|usr/sbin|lib)\b`)
	for _, m := range machines {
		for _, f := range append(m.Files, m.UnitFiles()...) {
			if !under(f.Path) {
				t.Errorf("%s: file %s is outside machine.Roots", m.Role, f.Path)
			}
			if strings.HasPrefix(f.Content, "-----BEGIN") {
				continue
			}
			for _, match := range absolutePath.FindAllStringSubmatch(f.Content, -1) {
				// The join token's copies, which a booted or Azure worker removes; the process
				// rehearsal runs no worker.
				if p := match[1]; !under(p) && !host.MatchString(p) && !slices.Contains(BootstrapCopies, p) {
					t.Errorf("%s: %s mentions %s, outside machine.Roots", m.Role, f.Path, p)
				}
			}
		}
	}
}
