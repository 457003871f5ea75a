package machine

import (
	"regexp"
	"slices"
	"testing"
)

// binaryUse finds the pinned binaries rendered text runs from BinDir.
var binaryUse = regexp.MustCompile(`/usr/local/bin/([A-Za-z0-9._-]+)`)

// Every binary a role's units and scripts run from BinDir is one its image installs: a machine
// booted from the image must find them all. Worker images add the node image's own files.
func TestImagesCarryWhatTheirRolesRun(t *testing.T) {
	c := testCluster(t)
	machines := append(renderAll(t, c), NodeImage(c, false), ControlPlaneImage())
	for _, m := range machines {
		image := ImageOf(m.Role)
		if m.Role == "control-plane-image" {
			image = ImageControlPlane
		}
		for _, f := range append(m.Files, m.UnitFiles()...) {
			for _, use := range binaryUse.FindAllStringSubmatch(f.Content, -1) {
				if !slices.Contains(ImageBinaries[image], use[1]) {
					t.Errorf("%s: %s runs %s, which the %s image does not install (machine.ImageBinaries)", m.Role, f.Path, use[0], image)
				}
			}
		}
	}
}
