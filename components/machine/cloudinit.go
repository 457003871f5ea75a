package machine

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/clusterforge/clusterforge/components/spec"
)

type cloudConfig struct {
	WriteFiles []writeFile `yaml:"write_files"`
	Mounts     [][]string  `yaml:"mounts,omitempty"`
	RunCmd     [][]string  `yaml:"runcmd"`
}

type writeFile struct {
	Path        string `yaml:"path"`
	Owner       string `yaml:"owner"`
	Permissions string `yaml:"permissions"`
	Content     string `yaml:"content"`
}

// UserData renders the machine as one #cloud-config document: every file and unit written,
// then the units enabled and started in order.
func UserData(m Machine) (string, error) {
	cfg := cloudConfig{}
	for _, f := range append(append([]File(nil), m.Files...), m.UnitFiles()...) {
		cfg.WriteFiles = append(cfg.WriteFiles, writeFile{
			Path: f.Path, Owner: "root:root", Permissions: fmt.Sprintf("%#o", f.Mode), Content: f.Content,
		})
	}
	if m.DisableEphemeralMount {
		cfg.Mounts = [][]string{{"ephemeral0"}}
	}
	enable := []string{"systemctl", "enable", "--now", "--no-block"}
	for _, u := range m.Units {
		if u.Enable {
			enable = append(enable, u.Name)
		}
	}
	cfg.RunCmd = [][]string{{"systemctl", "daemon-reload"}, enable}
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return "", fmt.Errorf("machine %s: encode cloud-config: %w", m.Role, err)
	}
	if n := b.Len(); n > spec.MaxCustomDataBytes {
		return "", &spec.FieldError{
			Field:   "machines." + m.Role,
			Problem: fmt.Sprintf("user-data is %d bytes, over Azure's %d-byte customData limit", n, spec.MaxCustomDataBytes),
			Fix:     "remove pool labels/taints or split the role's files into the node image",
		}
	}
	return b.String(), nil
}
