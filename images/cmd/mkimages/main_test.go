package main

import (
	"path"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

// A published bake pulls the pause image by the digest versions.yaml pins: its own pause image's,
// or a mirror's copy of it; any other pause image is refused.
func TestPauseDigest(t *testing.T) {
	for ref, want := range map[string]string{
		spec.DefaultPauseImage: spec.DefaultPauseImageDigest,
		"myregistry.azurecr.io/k8s/" + path.Base(spec.DefaultPauseImage): spec.DefaultPauseImageDigest,
		"myregistry.azurecr.io/k8s/pause:3.9":                            "",
		"registry.k8s.io/pause:3.10.2@sha256:" + strings.Repeat("a", 64): "",
	} {
		got, err := pauseDigest(ref)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("%s: got %q, %v; want %q", ref, got, err, want)
		}
	}
}
