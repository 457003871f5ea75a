package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"

	"gopkg.in/yaml.v3"
)

// ConfigKey is the stack config key that holds the cluster spec.
const ConfigKey = "clusterforge:cluster"

// StackDir is where the stack files live (Pulumi.yaml's stackConfigDir).
const StackDir = "stacks"

// MaxStackFileBytes bounds a stack file; real ones are a few kilobytes.
const MaxStackFileBytes = 1 << 20

// StackFile is the path of a stack's file in dir, the directory of stack files (StackDir).
func StackFile(dir, stack string) string {
	return filepath.Join(dir, "Pulumi."+stack+".yaml")
}

// LoadStack reads, decodes, defaults and validates the cluster spec of a stack file. Every error
// names the field path and the line of the stack file it came from.
func LoadStack(path string) (*Cluster, error) {
	data, err := readStackFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseStackFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// LoadSiblings loads every stack file of dir (StackDir) but stack's own; one that does not load is
// an error, since no check across the stacks may leave one out.
func LoadSiblings(dir, stack string) ([]*Cluster, error) {
	files, err := filepath.Glob(StackFile(dir, "*"))
	if err != nil {
		return nil, err
	}
	var out []*Cluster
	for _, f := range files {
		if f == StackFile(dir, stack) {
			continue
		}
		c, err := LoadStack(f)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func readStackFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxStackFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxStackFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes; a stack file holds one cluster spec of a few kilobytes", path, MaxStackFileBytes)
	}
	return data, nil
}

// ParseStackFile parses the spec under config.clusterforge:cluster of a stack file's contents.
func ParseStackFile(data []byte) (*Cluster, error) {
	node, err := clusterNode(data)
	if err != nil {
		return nil, err
	}
	return parseNode(node, true)
}

// ParseConfig parses the spec as Pulumi hands it to the program: the stack file's value as JSON.
// Its line numbers are those of that JSON, so errors name field paths only.
func ParseConfig(value string) (*Cluster, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(value), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigKey, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s is empty; add the cluster spec", ConfigKey)
	}
	return parseNode(doc.Content[0], false)
}

// ConfigJSON is the value Pulumi passes the program for a stack file: its spec as JSON.
func ConfigJSON(stackYAML []byte) (string, error) {
	node, err := clusterNode(stackYAML)
	if err != nil {
		return "", err
	}
	var v any
	if err := node.Decode(&v); err != nil {
		return "", err
	}
	js, err := json.Marshal(v)
	return string(js), err
}

func parseNode(n *yaml.Node, lines bool) (*Cluster, error) {
	c, err := decodeNode(n, lines, false)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeNode decodes and defaults a spec without validating it. A record (what was applied) may
// hold keys an earlier release wrote and this one no longer reads (removedKeys): they are skipped.
func decodeNode(n *yaml.Node, lines, record bool) (*Cluster, error) {
	d := &decoder{lines: lines, record: record, set: map[any]bool{}, at: map[string]int{}}
	c := &Cluster{}
	d.decode(n, "", reflect.ValueOf(c).Elem())
	if len(d.errs) > 0 {
		return nil, joinErrors(d.errs)
	}
	c.explicit, c.lines = d.set, d.at
	c.Default()
	return c, nil
}

// clusterNode finds config.clusterforge:cluster in a stack file of one YAML document.
func clusterNode(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("stack file is empty; add config.%s", ConfigKey)
		}
		return nil, fmt.Errorf("stack file: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("stack file: line %d: a second YAML document; a stack file holds one, remove the '---' and what follows", extra.Line)
	}
	config, err := child(doc.Content[0], "config")
	if err != nil {
		return nil, err
	}
	return child(config, ConfigKey)
}

// child is the value of key in a mapping, refusing a key given twice.
func child(n *yaml.Node, key string) (*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("stack file: line %d: want a mapping holding %s", n.Line, key)
	}
	var found *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != key {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("stack file: line %d: %s is set twice; keep one", n.Content[i].Line, key)
		}
		found = n.Content[i+1]
	}
	if found == nil {
		return nil, fmt.Errorf("stack file: line %d: no %s key; add the cluster spec under config.%s", n.Line, key, ConfigKey)
	}
	return found, nil
}
