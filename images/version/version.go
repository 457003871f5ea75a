// Package version is the plugin's version, reported to Packer by `describe`.
package version

import "github.com/hashicorp/packer-plugin-sdk/version"

// Version is bumped on every release; Prerelease is "dev" between releases; empty for a release.
var (
	Version    = "0.1.0"
	Prerelease = ""

	PluginVersion = version.NewPluginVersion(Version, Prerelease, "")
)
