package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"gopkg.in/yaml.v3"
)

// ConfigKey is the stack config key that holds the cluster spec.
const ConfigKey = "clusterforge:cluster"

// unknownField matches yaml.v3's strict-mode message, e.g. "line 7: field vmsize not found in type spec.Pool".
var unknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type spec\.(\w+)`)

// Parse decodes a cluster spec strictly (an unknown key is an error naming it), then
// defaults and validates it. The data may be YAML or JSON (Pulumi hands structured config over as JSON).
func Parse(data []byte) (*Cluster, error) {
	var c Cluster
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, explainDecode(err)
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func explainDecode(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %w", ConfigKey, err)
	}
	errs := make([]error, 0, len(te.Errors))
	for _, msg := range te.Errors {
		if m := unknownField.FindStringSubmatch(msg); m != nil {
			errs = append(errs, &FieldError{
				Field:   sectionOf(m[3]) + m[2],
				Problem: fmt.Sprintf("unknown key %q (line %s)", m[2], m[1]),
				Fix:     "check its spelling against docs/stack-reference.md or remove it",
			})
			continue
		}
		errs = append(errs, fmt.Errorf("%s: %s", ConfigKey, msg))
	}
	return errors.Join(errs...)
}

// sectionOf names where a Go type sits in the config, for error paths.
func sectionOf(typeName string) string {
	return map[string]string{
		"Versions": "versions.", "Admin": "admin.", "Network": "network.", "Hub": "network.hub.",
		"Etcd": "etcd*.", "APIServer": "apiServer.", "Kubelet": "kubelet.", "DNS": "dns.",
		"Pool": "pools[].", "Taint": "pools[].taints[].",
	}[typeName]
}

// stackFile is the part of a Pulumi stack file clusterforge reads.
type stackFile struct {
	Config map[string]yaml.Node `yaml:"config"`
}

// ClusterConfig extracts the raw cluster spec from a Pulumi stack file (stacks/Pulumi.<env>.yaml).
func ClusterConfig(stackYAML []byte) ([]byte, error) {
	var f stackFile
	if err := yaml.Unmarshal(stackYAML, &f); err != nil {
		return nil, fmt.Errorf("stack file: %w", err)
	}
	node, ok := f.Config[ConfigKey]
	if !ok {
		return nil, fmt.Errorf("stack file: no %s key under config; add the cluster spec there", ConfigKey)
	}
	return yaml.Marshal(&node)
}

// LoadStack reads, defaults and validates the cluster spec of a stack file.
func LoadStack(path string) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw, err := ClusterConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
