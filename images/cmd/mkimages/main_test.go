package main

import (
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

// A published bake pulls the pause image by a digest: the one its reference names, else
// versions.yaml's for the pinned image; another image without one is refused.
func TestPauseDigest(t *testing.T) {
	other := "myregistry.azurecr.io/k8s/pause:3.10@sha256:" + strings.Repeat("a", 64)
	for ref, want := range map[string]string{
		spec.DefaultPauseImage:                 spec.DefaultPauseImageDigest,
		other:                                  "sha256:" + strings.Repeat("a", 64),
		"myregistry.azurecr.io/k8s/pause:3.10": "",
	} {
		got, err := pauseDigest(ref)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("%s: got %q, %v; want %q", ref, got, err, want)
		}
	}
}
