// Package buildinfo tells which clusterforge a binary is: the commit `go build` stamped into it.
package buildinfo

import "runtime/debug"

// Version is the binary's clusterforge version: its module version when built from a tagged
// module, else the commit it was built from (12 hex digits, "-modified" with uncommitted changes),
// else "(devel)" (go run, or -buildvcs=false).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return version(bi)
}

func version(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-modified"
			}
		}
	}
	if revision == "" {
		return "(devel)"
	}
	return revision[:min(12, len(revision))] + modified
}
