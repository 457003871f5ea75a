// Package version is the plugin's version, reported to Packer by `describe`.
package version

import "github.com/hashicorp/packer-plugin-sdk/version"

// Version is bumped on every release; Prerelease is "dev" between releases.
var (
	Version    = "0.1.0"
	Prerelease = "dev"

	PluginVersion = version.NewPluginVersion(Version, Prerelease, "")
)
