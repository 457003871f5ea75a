package machine

import (
	"fmt"
	"sort"
	"strings"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Flags are a component's command-line flags, rendered sorted by name so output is stable.
type Flags map[string]string

// Args returns "--name=value" for every flag, sorted.
func (f Flags) Args() []string {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	args := make([]string, len(names))
	for i, n := range names {
		args[i] = fmt.Sprintf("--%s=%s", n, f[n])
	}
	return args
}

// envBinary is env(1), from coreutils on every image.
const envBinary = "/usr/bin/env"

// service describes a long-running systemd service.
type service struct {
	name        string
	description string
	after       []string
	requires    []string
	binary      string
	// subcommand comes before the flags, e.g. "apply" for kubectl.
	subcommand string
	flags      Flags
	// env loads the machine identity; flags may then use ${NODE_NAME}, ${NODE_IP} and ${PROVIDER_ID}.
	envFiles []string
	// environ is NAME=value pairs set by env(1) on the command line, where systemd expands
	// ${NODE_NAME} and the like (it does not in Environment= lines).
	environ []string
	// oneshot runs the command once to completion (with retries on failure).
	oneshot     bool
	limitNoFile bool
	// onFailureOnly keeps a service down after a clean exit; others restart always, since a loop
	// that returned is as gone as one that crashed.
	onFailureOnly bool
}

// unit renders the service as an enabled systemd unit.
func (s service) unit() Unit {
	var b strings.Builder
	fmt.Fprintf(&b, "[Unit]\nDescription=%s\n", unitText(s.description))
	if len(s.after) > 0 {
		fmt.Fprintf(&b, "After=%s\n", strings.Join(s.after, " "))
	}
	if len(s.requires) > 0 {
		fmt.Fprintf(&b, "Requires=%s\n", strings.Join(s.requires, " "))
	}
	// Keep retrying forever: a control plane converges once its peers are up.
	b.WriteString("StartLimitIntervalSec=0\n\n[Service]\n")
	if s.oneshot {
		b.WriteString("Type=oneshot\nRemainAfterExit=yes\n")
	}
	for _, f := range s.envFiles {
		fmt.Fprintf(&b, "EnvironmentFile=%s\n", f)
	}
	b.WriteString("ExecStart=")
	if len(s.environ) > 0 {
		b.WriteString(envBinary)
		for _, e := range s.environ {
			b.WriteString(" " + ExecArg(e))
		}
		b.WriteString(" ")
	}
	b.WriteString(ExecArg(s.binary))
	if s.subcommand != "" {
		b.WriteString(" " + ExecArg(s.subcommand))
	}
	for _, a := range s.flags.Args() {
		b.WriteString(" \\\n  " + ExecArg(a))
	}
	restart := "always"
	if s.oneshot || s.onFailureOnly { // systemd restarts a oneshot only on failure
		restart = "on-failure"
	}
	b.WriteString("\nRestart=" + restart + "\nRestartSec=5\n")
	if s.limitNoFile {
		b.WriteString("LimitNOFILE=1048576\n")
	}
	b.WriteString("\n[Install]\nWantedBy=multi-user.target\n")
	return Unit{Name: s.name + ".service", Content: b.String(), Enable: true}
}

// identityUnit is the first unit of every machine: it writes NodeEnvFile from the instance metadata.
const identityUnit = "clusterforge-identity.service"

// identity renders the boot step that learns who this machine is. Azure's instance metadata
// service gives the VM's name and primary private IP; nothing per-machine is in user-data.
func identity() part {
	script := `#!/bin/sh
# Writes this machine's identity for the clusterforge units (NODE_NAME, NODE_IP, PROVIDER_ID).
set -eu
imds=http://` + wellknown.IMDSAddress + `/metadata/instance
query() { curl -fsS --retry 30 --retry-delay 2 --retry-connrefused -H Metadata:true "$imds/$1?api-version=2021-02-01&format=text"; }
# The resource id becomes the kubelet's --provider-id (azure://<id>, as cloud-provider-azure and
# cluster-autoscaler read it): only an Azure compute resource id may land in the environment file.
id=$(query compute/resourceId)
case "$id" in
  *[!A-Za-z0-9/._\(\)-]*|'') echo "clusterforge-identity: compute/resourceId '$id' is not a resource id" >&2; exit 1 ;;
  /subscriptions/*/resourceGroups/*/providers/Microsoft.Compute/*) ;;
  *) echo "clusterforge-identity: compute/resourceId '$id' is not a Microsoft.Compute resource" >&2; exit 1 ;;
esac
mkdir -p "$(dirname ` + NodeEnvFile + `)"
{
  echo "NODE_NAME=$(hostname)"
  echo "NODE_IP=$(query network/interface/0/ipv4/ipAddress/0/privateIpAddress)"
  echo "PROVIDER_ID=azure://$id"
} > ` + NodeEnvFile + `.tmp
mv ` + NodeEnvFile + `.tmp ` + NodeEnvFile + `
`
	path := LibexecDir + "/identity"
	return part{
		files: []File{{Path: path, Content: script, Mode: 0o755}},
		units: []Unit{bootStep(identityUnit, "learn this machine's name and address",
			"Wants=network-online.target\nAfter=network-online.target\nRequires="+ImageCheckUnit+"\nAfter="+ImageCheckUnit, path)},
	}
}

// bootStep is an enabled oneshot unit that runs script once per boot; ordering holds its
// [Unit] dependency lines.
func bootStep(name, description, ordering, script string) Unit {
	return Unit{Name: name, Enable: true, Content: `[Unit]
Description=clusterforge: ` + unitText(description) + `
` + ordering + `

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=` + ExecArg(script) + `

[Install]
WantedBy=multi-user.target
`}
}
