package processes

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// materialize writes a machine's rendered files and units under its root (deviation "OS
// disk"), its node.env (deviation "instance metadata"), and links the pinned binaries into its
// /usr/local/bin.
func (p *Layout) materialize(in machines.Instance) error {
	root := p.Root(in.Name)
	if err := removeAllBut(root, filepath.Join(root, machine.EtcdDataDir)); err != nil {
		return err
	}
	files := append(append([]machine.File(nil), in.Machine.Files...), in.Machine.UnitFiles()...)
	files = append(files, machine.File{Path: machine.NodeEnvFile, Content: identityEnv(p.Cluster, in), Mode: 0o644})
	for _, f := range files {
		content := f.Content
		if !strings.HasPrefix(content, "-----BEGIN") { // keys and certificates hold no paths
			content = p.onMachine(in, content)
		}
		path := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), os.FileMode(f.Mode)); err != nil {
			return err
		}
	}
	bin := filepath.Join(root, machine.BinDir)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	dirs, err := p.toolDirs(in.Versions)
	if err != nil {
		return err
	}
	for _, dir := range dirs { // the first directory that has a binary wins
		tools, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("rehearsal: read the toolchain: %w (run `make tools`)", err)
		}
		for _, t := range tools {
			link := filepath.Join(bin, t.Name())
			if _, err := os.Lstat(link); t.IsDir() || strings.HasPrefix(t.Name(), ".") || err == nil {
				continue
			}
			if err := os.Symlink(filepath.Join(dir, t.Name()), link); err != nil {
				return err
			}
		}
	}
	return nil
}

// scripts/toolchain.sh's groups of the releases before the pinned ones: the upgrade drills'
// starting point, and the Kubernetes minor an older cluster passes through.
const (
	UpgradeReleases = "upgrades"
	HopReleases     = "hops"
)

// Releases are the scripts/toolchain.sh groups a stack's versions need beyond the rehearsal's:
// the older releases when it names one (the only other versions a stack may name).
func Releases(v spec.Versions) []string {
	var groups []string
	if v.Kubernetes == spec.PreviousKubernetesVersion || v.Kubelet == spec.PreviousKubernetesVersion || v.Etcd == spec.PreviousEtcdVersion {
		groups = append(groups, UpgradeReleases)
	}
	if v.Kubernetes == spec.HopKubernetesVersion || v.Kubelet == spec.HopKubernetesVersion {
		groups = append(groups, HopReleases)
	}
	return groups
}

// toolDirs are where a machine's binaries come from: .tools/bin holds the pinned releases, and
// .tools/versions/<component>-<version> (scripts/toolchain.sh upgrades) an older one a machine
// still runs before a roll reaches it.
func (p *Layout) toolDirs(v spec.Versions) ([]string, error) {
	var dirs []string
	for _, pin := range []struct{ component, version, pinned string }{
		{"kubernetes", v.Kubernetes, spec.DefaultKubernetesVersion},
		{"etcd", v.Etcd, spec.DefaultEtcdVersion},
	} {
		if pin.version == pin.pinned || pin.version == "" {
			continue
		}
		dir := filepath.Join(filepath.Dir(p.Tools), "versions", pin.component+"-"+pin.version)
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("rehearsal: %s %s is not built (%v): run scripts/toolchain.sh %s", pin.component, pin.version, err, strings.Join(Releases(v), " "))
		}
		dirs = append(dirs, dir)
	}
	return append(dirs, p.Tools), nil
}

// removeAllBut empties dir except the path keep and its parents: a machine's disks outlive a
// stop, as an Azure VM's do short of a deallocation (deviation "machine stop").
func removeAllBut(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case path == keep:
		case strings.HasPrefix(keep, path+"/") && e.IsDir():
			if err := removeAllBut(path, keep); err != nil {
				return err
			}
		default:
			if err := os.RemoveAll(path); err != nil {
				return err
			}
		}
	}
	return nil
}

// onMachine rewrites text a machine reads: its 127.0.0.1 and 0.0.0.0 become its own address and
// absolute paths move under its root.
func (p *Layout) onMachine(in machines.Instance, s string) string {
	root := p.Root(in.Name)
	var pairs []string
	for _, dir := range machine.Roots {
		pairs = append(pairs, dir, filepath.Join(root, dir))
	}
	return strings.NewReplacer(pairs...).Replace(ownLoopback(s, in.IP))
}

// unitCommand is what the rehearsal needs of a rendered systemd unit.
type unitCommand struct {
	Name    string
	Oneshot bool
	// Restart is systemd's Restart= value: "always", "on-failure" or empty for never.
	Restart    string
	RestartSec time.Duration
	envFiles   []string
	Exec       []string
}

// parseUnit reads the [Service] section of a rendered unit.
func parseUnit(u machine.Unit) (unitCommand, error) {
	cmd := unitCommand{Name: strings.TrimSuffix(u.Name, ".service"), RestartSec: 100 * time.Millisecond}
	joined := strings.ReplaceAll(u.Content, "\\\n", " ")
	section := ""
	sc := bufio.NewScanner(strings.NewReader(joined))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if section != "[Service]" || !ok {
			continue
		}
		switch key {
		case "Type":
			cmd.Oneshot = value == "oneshot"
		case "EnvironmentFile":
			cmd.envFiles = append(cmd.envFiles, value)
		case "ExecStart":
			words, err := machine.ExecWords(value)
			if err != nil {
				return cmd, fmt.Errorf("unit %s: %w", u.Name, err)
			}
			cmd.Exec = words
		case "Restart":
			if value != "always" && value != "on-failure" && value != "no" {
				return cmd, fmt.Errorf("unit %s: Restart=%s is not rehearsed", u.Name, value)
			}
			if value == "no" {
				value = ""
			}
			cmd.Restart = value
		case "RestartSec":
			d, err := time.ParseDuration(value + "s")
			if err != nil {
				return cmd, fmt.Errorf("unit %s: RestartSec=%s: %w", u.Name, value, err)
			}
			cmd.RestartSec = d
		}
	}
	if len(cmd.Exec) == 0 {
		return cmd, fmt.Errorf("unit %s: no ExecStart", u.Name)
	}
	return cmd, nil
}

// environment reads the unit's EnvironmentFiles (with read, which knows where the machine's files
// are) as systemd does: the variables, and the same as NAME=value pairs.
func (u unitCommand) environment(read func(string) ([]byte, error)) (map[string]string, []string, error) {
	vars := map[string]string{}
	var env []string
	for _, f := range u.envFiles {
		data, err := read(f)
		if err != nil {
			return nil, nil, fmt.Errorf("unit %s: EnvironmentFile: %w", u.Name, err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
				vars[k] = v
				env = append(env, k+"="+v)
			}
		}
	}
	return vars, env, nil
}

// unitArgv is the argv and environment a unit runs on a machine: env files read from under the
// root, variables expanded, flag overrides applied, then the machine rewrite.
func (p *Layout) unitArgv(in machines.Instance, u unitCommand) (argv, env []string, err error) {
	vars, env, err := u.environment(func(f string) ([]byte, error) { return os.ReadFile(p.onMachine(in, f)) })
	if err != nil {
		return nil, nil, err
	}
	overrides := flagOverrides[u.Name+".service"]
	applied := map[string]bool{}
	for _, word := range u.Exec {
		word = machine.ExpandEnv(word, vars)
		if p.EventsInMainEtcd && strings.HasPrefix(word, "--"+machine.EventsOverrideFlag+"=") {
			continue
		}
		if name, _, ok := strings.Cut(strings.TrimPrefix(word, "--"), "="); ok && strings.HasPrefix(word, "--") {
			if v, ok := overrides[name]; ok {
				word, applied[name] = "--"+name+"="+v, true
			}
		}
		argv = append(argv, p.onMachine(in, word))
	}
	for name := range overrides {
		if !applied[name] {
			return nil, nil, fmt.Errorf("unit %s: the rehearsal overrides --%s, but the rendered unit has no such flag; update flagOverrides", u.Name, name)
		}
	}
	if in.Role == spec.RoleEtcdMain { // deviation "backup store"
		env = append(env, etcdbackup.ConnectionStringEnv+"="+p.StoreConnectionString())
	}
	return argv, append(env, "PATH="+os.Getenv("PATH")), nil
}
