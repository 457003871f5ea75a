//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config

// Package rootfs is the clusterforge-rootfs builder: a Debian root filesystem made by debootstrap
// on this machine, provisioned over a chroot, and written as a tarball. It bakes a real node image
// with no cloud, with the same provisioner the azure-arm builds run.
package rootfs

import (
	"fmt"
	"path/filepath"
	"regexp"

	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"
)

// Config is the builder's configuration.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// Output is the root filesystem tarball the build writes, e.g. build/images/node.tar. Required.
	Output string `mapstructure:"output" required:"true"`
	// Suite is the Debian release debootstrap installs. Default "bookworm".
	Suite string `mapstructure:"suite"`
	// Mirror is the Debian archive debootstrap downloads from. Default "http://deb.debian.org/debian".
	Mirror string `mapstructure:"mirror"`
	// Packages are installed on top of the minbase variant: what a Debian cloud image has that a
	// node needs (systemd, udev, iproute2, iptables, e2fsprogs, ...). Default DefaultPackages.
	Packages []string `mapstructure:"packages"`
	// CacheDir keeps downloaded .debs between builds. Default "<packer cache>/debootstrap-<suite>".
	CacheDir string `mapstructure:"cache_dir"`

	ctx interpolate.Context
}

// DefaultPackages are what the Azure base image (Debian 12 cloud) provides, or worker.pkr.hcl
// installs (nftables, ipset), that the machines' units and the kubelet use: cloud-init applies the
// user-data at first boot, and the identity unit asks the instance metadata service with curl. python3-cffi-backend is cloud-init's dependency
// through a virtual package (python3-cffi-backend-api-min), which debootstrap does not resolve.
var DefaultPackages = []string{
	"systemd", "systemd-sysv", "udev", "kmod", "dbus", "iproute2", "iptables", "conntrack", "ethtool",
	"socat", "e2fsprogs", "procps", "ca-certificates", "cloud-init", "python3-cffi-backend", "curl", "nftables", "ipset",
}

var debianName = regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]*$`)

// Prepare decodes and validates the configuration; every error names its option.
// The Debian archive a bake installs from unless its template names another.
const (
	DefaultSuite  = "bookworm"
	DefaultMirror = "http://deb.debian.org/debian"
)

func (c *Config) Prepare(raws ...interface{}) error {
	if err := config.Decode(c, &config.DecodeOpts{
		PluginType: "clusterforge-rootfs", Interpolate: true, InterpolateContext: &c.ctx,
	}, raws...); err != nil {
		return err
	}
	if c.Suite == "" {
		c.Suite = DefaultSuite
	}
	if c.Mirror == "" {
		c.Mirror = DefaultMirror
	}
	if c.Packages == nil {
		c.Packages = DefaultPackages
	}
	var errs *packersdk.MultiError
	fail := func(format string, args ...any) { errs = packersdk.MultiErrorAppend(errs, fmt.Errorf(format, args...)) }
	if c.Output == "" {
		fail("output: required; the tarball to write, e.g. build/images/node.tar")
	} else if abs, err := filepath.Abs(c.Output); err != nil {
		fail("output: %v", err)
	} else {
		c.Output = abs
	}
	if !debianName.MatchString(c.Suite) {
		fail("suite: %q is not a Debian release name such as bookworm", c.Suite)
	}
	for i, p := range c.Packages {
		if !debianName.MatchString(p) {
			fail("packages[%d]: %q is not a Debian package name", i, p)
		}
	}
	if c.CacheDir == "" {
		dir, err := packersdk.CachePath("debootstrap-" + c.Suite)
		if err != nil {
			fail("cache_dir: %v", err)
		}
		c.CacheDir = dir
	}
	if errs != nil && len(errs.Errors) > 0 {
		return errs
	}
	return nil
}
