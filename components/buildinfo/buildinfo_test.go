package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a tagged module", debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{"a clean checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "4452f43a1b2c3d4e5f60718293a4b5c6d7e8f901"}, {Key: "vcs.modified", Value: "false"}}}, "4452f43a1b2c"},
		{"uncommitted changes", debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "4452f43a1b2c3d4e5f60718293a4b5c6d7e8f901"}, {Key: "vcs.modified", Value: "true"}}}, "4452f43a1b2c-modified"},
		{"go run", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
	} {
		if got := version(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
