package machine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// hostile are values an attacker or a careless operator might put in a stack, each trying to
// add a flag, a unit line, a shell command or a YAML key where it lands.
var hostile = []string{
	"x --authorization-mode=AlwaysAllow",
	"x\nExecStartPre=/bin/sh -c 'id > /tmp/pwned'",
	`a"b'c\d $HOME ${HOME} $(id) ` + "`id`" + ` %n %% ; & | > /tmp/x`,
	"\\",
	"line\\\nExecStartPost=/bin/true",
	"x\x00y\x1b[0m\t\r",
	";",
	"ünïcødé ☃",
	"${NODE_IP}",
}

// hostileCluster renders what no validated stack would hold: Validate is bypassed on purpose.
// Values that are parsed before they are rendered (CIDRs, addresses, counts) cannot carry text
// and keep their valid values.
func hostileCluster(t *testing.T) *spec.Cluster {
	t.Helper()
	c := testCluster(t)
	labels := map[string]string{}
	for i, h := range hostile {
		labels[fmt.Sprintf("k%d", i)] = h
		if !strings.ContainsAny(h, ",=") { // those would split --node-labels: Render refuses them
			labels[h] = "v"
		}
	}
	c.Name = hostile[1]
	c.Pools[0].Name = hostile[2]
	c.Pools[0].Labels = labels
	c.Pools[0].Taints = []spec.Taint{{Key: hostile[1], Value: hostile[2], Effect: "NoSchedule\nauthorization: {mode: AlwaysAllow}"}}
	c.APIServer.EtcdCompactionInterval = hostile[0]
	return c
}

// Every unit of every hostile machine, as the real systemd loads it: each argument is exactly
// the value the renderer meant, however hostile, and no unit gains a command.
func TestHostileValuesStayOneArgument(t *testing.T) {
	c := hostileCluster(t)
	machines := append(renderAll(t, c), NodeImage(c, false))
	intended := map[string][]string{
		"kube-apiserver.service":            append([]string{BinDir + "/kube-apiserver"}, APIServerFlags(c).Args()...),
		"kube-controller-manager.service":   append([]string{BinDir + "/kube-controller-manager"}, ControllerManagerFlags(c).Args()...),
		"kube-scheduler.service":            append([]string{BinDir + "/kube-scheduler"}, SchedulerFlags(c).Args()...),
		"kubelet.service":                   append([]string{BinDir + "/kubelet"}, KubeletFlags(c.Pools[0]).Args()...),
		"clusterforge-csr-approver.service": append([]string{BinDir + "/clusterforge-csr-approver"}, CSRApproverFlags(c).Args()...),
	}
	checked := 0
	for _, m := range machines {
		dir := readableDir(t) // systemd runs as nobody
		for _, u := range m.Units {
			if err := os.WriteFile(filepath.Join(dir, u.Name), []byte(u.Content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, u := range m.Units {
			if strings.HasSuffix(u.Name, ".path") { // a trigger: no command of its own
				continue
			}
			loaded := systemdLoad(t, dir, u.Name)
			if loaded.execs["ExecStart"] == nil {
				t.Errorf("%s: systemd sees no ExecStart:\n%s", u.Name, loaded.dump)
				continue
			}
			for kind := range loaded.execs {
				if kind != "ExecStart" && !(u.Name == ContainerdUnit && kind == "ExecStartPre") && !(u.Name == etcdJoinUnit && kind == "ExecStartPost") {
					t.Errorf("%s: systemd sees an %s the renderer never wrote", u.Name, kind)
				}
			}
			rendered, _, _ := strings.Cut(strings.TrimPrefix(u.Content, "[Unit]\nDescription="), "\n")
			if loaded.description != strings.ReplaceAll(rendered, "%%", "%") {
				t.Errorf("%s: systemd reads the description %q", u.Name, loaded.description)
			}
			argv := loaded.execs["ExecStart"]
			words, err := ExecWords(execStart(u.Content))
			if err != nil || !slices.Equal(words, argv) {
				t.Errorf("%s: ExecWords gives %q (%v), systemd %q", u.Name, words, err, argv)
			}
			if want, ok := intended[u.Name]; ok {
				got := make([]string, len(argv))
				for i, w := range argv {
					got[i] = ExpandEnv(w, unitEnvIdentity) // "$$" is '$' at exec time
				}
				// An argument cannot hold NUL: systemd keeps the escape as text, and so does ExecWords.
				for i := range want {
					want[i] = strings.ReplaceAll(want[i], "\x00", `\x00`)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: systemd runs\n%q\nwant\n%q", u.Name, got, want)
				}
				checked++
			}
		}
	}
	if checked != len(intended) {
		t.Errorf("compared %d units with their flags, want %d", checked, len(intended))
	}
}

// readableDir is a temporary directory others may read (t.TempDir's parent is private).
func readableDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "clusterforge-units-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A label the kubelet would split into two is refused by the renderer itself.
func TestSplittingLabelsAreRefused(t *testing.T) {
	c := testCluster(t)
	for _, labels := range []map[string]string{{"team": "a,example.com/pool=cpu"}, {"a=b": "c"}, {"a,b": "c"}} {
		c.Pools[0].Labels = labels
		if _, err := Render(c, pki.Bundle{}, spec.WorkerRole(c.Pools[0].Name)); err == nil || !strings.Contains(err.Error(), "split") {
			t.Errorf("labels %q: %v, want the split refused", labels, err)
		}
	}
	c.Pools[0].Labels = map[string]string{"example.com/x": "a=b", wellknown.PoolLabel: "other"}
	if got := NodeLabels(c.Pools[0]); got[wellknown.PoolLabel] != "" || got["example.com/x"] != "a=b" {
		t.Errorf("NodeLabels %v: the pool label is the CSR approver's, not the kubelet's, and '=' in a value is the kubelet's too", got)
	}
}

// unitEnvIdentity expands every unit variable to its own reference.
var unitEnvIdentity = func() map[string]string {
	m := map[string]string{}
	for _, name := range UnitEnv {
		m[name] = "${" + name + "}"
	}
	return m
}()

// The kubelet's YAML keeps hostile taints as values: the real YAML parser reads them back whole
// and finds no key they tried to add.
func TestHostileTaintsStayValues(t *testing.T) {
	c := hostileCluster(t)
	var cfg struct {
		Authorization struct{ Mode string } `yaml:"authorization"`
		Taints        []spec.Taint          `yaml:"registerWithTaints"`
	}
	if err := yaml.Unmarshal([]byte(KubeletConfig(c, c.Pools[0])), &cfg); err != nil {
		t.Fatal(err)
	}
	if want := RegisterTaints(c.Pools[0]); cfg.Authorization.Mode != "Webhook" || !slices.Equal(cfg.Taints, want) {
		t.Errorf("authorization %q, taints %q; want Webhook and %q", cfg.Authorization.Mode, cfg.Taints, want)
	}
}

// Every rendered shell script parses.
func TestScriptsParse(t *testing.T) {
	c := hostileCluster(t)
	for _, m := range append(renderAll(t, c), NodeImage(c, false)) {
		for _, f := range m.Files {
			if strings.HasPrefix(f.Content, "#!/bin/sh") {
				if out, err := exec.Command("sh", "-n", "-c", f.Content).CombinedOutput(); err != nil {
					t.Errorf("%s %s: %v\n%s", m.Role, f.Path, err, out)
				}
			}
		}
	}
}

// execStart is a unit's ExecStart value with its line continuations joined.
func execStart(unit string) string {
	for _, line := range strings.Split(strings.ReplaceAll(unit, "\\\n", " "), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			return v
		}
	}
	return ""
}

// loadedUnit is what systemd's own dump says of a unit it loaded.
type loadedUnit struct {
	description string
	execs       map[string][]string
	dump        string
}

// systemdLoad has the real systemd (252, Debian 12) load a unit from dir in test mode, which
// starts nothing and prints every unit it would start with each command's argv re-quoted.
func systemdLoad(t *testing.T, dir, unit string) loadedUnit {
	t.Helper()
	const systemd = "/lib/systemd/systemd"
	if _, err := os.Stat(systemd); err != nil {
		t.Fatalf("%s is missing: run `make setup` (Debian's systemd)", systemd)
	}
	argv := []string{systemd, "--test", "--system", "--unit=" + unit, "--log-target=console"}
	if os.Geteuid() == 0 { // systemd refuses test mode as root
		argv = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, argv...)
	}
	empty := t.TempDir()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"HOME=/", "SYSTEMD_UNIT_PATH=" + dir + ":/lib/systemd/system",
		"SYSTEMD_GENERATOR_PATH=" + empty, "SYSTEMD_ENVIRONMENT_GENERATOR_PATH=" + empty}
	out, _ := cmd.CombinedOutput()
	dump := string(out)
	i := strings.Index(dump, "\t-> Unit "+unit+":\n")
	if i < 0 {
		t.Fatalf("systemd did not load %s:\n%.3000s", unit, dump)
	}
	section := dump[i+1:]
	if j := strings.Index(section, "\n\t-> Unit "); j >= 0 {
		section = section[:j]
	}
	u := loadedUnit{execs: map[string][]string{}, dump: section}
	kind := ""
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, "\t\tDescription: "):
			u.description = strings.TrimPrefix(line, "\t\tDescription: ")
		case strings.HasPrefix(line, "\t\t-> Exec"):
			kind = strings.TrimSuffix(strings.TrimPrefix(line, "\t\t-> "), ":")
		case strings.HasPrefix(line, "\t\t\tCommand Line: ") && kind != "":
			words, err := unquoteCommandLine(strings.TrimPrefix(line, "\t\t\tCommand Line: "))
			if err != nil {
				t.Fatalf("%s: %v in %q", unit, err, line)
			}
			u.execs[kind] = words
		}
	}
	return u
}

// unquoteCommandLine reads systemd's quote_command_line: words separated by spaces, a word with
// special bytes double-quoted with '\', '"', '`' and '$' backslashed and control bytes C-escaped
// (\n, \xNN, or octal \ooo).
func unquoteCommandLine(s string) ([]string, error) {
	var words []string
	for s != "" {
		if s[0] != '"' {
			w, rest, _ := strings.Cut(s, " ")
			words, s = append(words, w), rest
			continue
		}
		var w strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' {
				w.WriteByte(s[i])
				continue
			}
			i++
			switch c := s[i]; c {
			case 'n', 't', 'r', 'a', 'b', 'f', 'v':
				w.WriteByte(map[byte]byte{'n': '\n', 't': '\t', 'r': '\r', 'a': '\a', 'b': '\b', 'f': '\f', 'v': '\v'}[c])
			case 'x':
				var b byte
				if _, err := fmt.Sscanf(s[i+1:i+3], "%02x", &b); err != nil {
					return nil, err
				}
				w.WriteByte(b)
				i += 2
			case '0', '1', '2', '3':
				var b byte
				if _, err := fmt.Sscanf(s[i:i+3], "%03o", &b); err != nil {
					return nil, err
				}
				w.WriteByte(b)
				i += 2
			default:
				w.WriteByte(c)
			}
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated quote")
		}
		words, s = append(words, w.String()), strings.TrimPrefix(s[i+1:], " ")
	}
	return words, nil
}
