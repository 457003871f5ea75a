package spec

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxSpecNodes bounds the YAML nodes one spec may expand to, aliases included: a real spec has a
// few hundred, and an alias bomb ("billion laughs") is refused before it costs memory.
const maxSpecNodes = 20000

// decoder walks a YAML node tree onto the Cluster by its yaml tags. Unlike yaml.v3's Decode it
// names every refused value by its field path, refuses a float for an integer instead of
// truncating it, refuses quoted numbers and unquoted booleans for text, duplicate keys and
// merge keys, and records which fields the stack set (an explicit 0 is kept, not defaulted) and
// the line each came from.
type decoder struct {
	// lines is false when the YAML is not the stack file (Pulumi hands the spec over as JSON):
	// its line numbers would point into a copy nobody can open.
	lines bool
	// record is set for what was applied, which may hold keys of an earlier release.
	record   bool
	errs     []error
	nodes    int
	exceeded bool
	set      map[any]bool
	at       map[string]int
}

func (d *decoder) fail(n *yaml.Node, path, fix, problem string, args ...any) {
	e := &FieldError{Field: path, Problem: fmt.Sprintf(problem, args...), Fix: fix}
	if d.lines {
		e.Line = n.Line
	}
	d.errs = append(d.errs, e)
}

// decode fills v (addressable) from n; path is the field path of v.
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	if d.nodes++; d.nodes > maxSpecNodes {
		if !d.exceeded {
			d.fail(n, path, "write the spec out plainly; aliases may not multiply it", "the spec expands to more than %d YAML nodes", maxSpecNodes)
			d.exceeded = true
		}
		return
	}
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "key:" with no value: as if absent
	}
	if d.lines && path != "" {
		d.at[path] = n.Line
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(n, path, v)
	case reflect.Slice:
		d.sequence(n, path, v)
	case reflect.Map:
		d.stringMap(n, path, v)
	case reflect.Pointer: // *bool
		elem := reflect.New(v.Type().Elem())
		if d.scalar(n, path, elem.Elem()) {
			v.Set(elem)
			d.set[v.Addr().Interface()] = true
		}
	default:
		if d.scalar(n, path, v) {
			d.set[v.Addr().Interface()] = true
		}
	}
}

func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, orRoot(path), "write it as a mapping of keys, see docs/reference/stack.md", "is %s, not a mapping", describe(n))
		return
	}
	fields := map[string]int{}
	for i := range v.NumField() {
		if tag := v.Type().Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
			fields[tag] = i
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		if key.Kind != yaml.ScalarNode || key.Tag == "!!merge" {
			d.fail(key, orRoot(path), "write every key out; merge keys (<<) and complex keys are not supported", "holds a key clusterforge does not read")
			continue
		}
		name := join(path, MapKey(key.Value))
		if seen[key.Value] {
			d.fail(key, name, "keep one of them", "is set twice")
			continue
		}
		seen[key.Value] = true
		idx, ok := fields[key.Value]
		if hint, gone := removedKeys[name]; !ok && gone {
			if !d.record {
				d.fail(key, name, hint, "is no longer read")
			}
			continue
		}
		if !ok {
			d.fail(key, name, "check its spelling against docs/reference/stack.md or remove it", "unknown key %s", strconv.Quote(key.Value))
			continue
		}
		d.decode(value, name, v.Field(idx))
	}
}

// removedKeys are keys earlier releases read, with what to do instead.
var removedKeys = map[string]string{
	"versions.schedulerPlugins": "remove it: gang scheduling (L16) is Kubernetes' own since 1.37, the kube-scheduler of versions.kubernetes",
}

func (d *decoder) sequence(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "write it as a list", "is %s, not a list", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	v.Set(s) // before the elements decode: what they record points into this backing array
	for i, item := range n.Content {
		d.decode(item, fmt.Sprintf("%s[%d]", path, i), s.Index(i))
	}
	d.set[v.Addr().Interface()] = true
}

func (d *decoder) stringMap(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "write it as a mapping of keys to values", "is %s, not a mapping", describe(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		if key.Kind != yaml.ScalarNode || key.Tag == "!!merge" {
			d.fail(key, path, "write every key out as text", "holds a key that is not text")
			continue
		}
		name := fmt.Sprintf("%s[%s]", path, MapKey(key.Value))
		if m.MapIndex(reflect.ValueOf(key.Value)).IsValid() {
			d.fail(key, name, "keep one of them", "is set twice")
			continue
		}
		var s string
		if d.nodes++; value.Kind == yaml.AliasNode {
			value = value.Alias
		}
		if d.scalar(value, name, reflect.ValueOf(&s).Elem()) {
			if d.lines {
				d.at[name] = value.Line
			}
			m.SetMapIndex(reflect.ValueOf(key.Value), reflect.ValueOf(s))
		}
	}
	v.Set(m)
	d.set[v.Addr().Interface()] = true
}

// scalar decodes a text, integer or boolean leaf, refusing any other YAML type for it.
func (d *decoder) scalar(n *yaml.Node, path string, v reflect.Value) bool {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "write a single value", "is %s, not a single value", describe(n))
		return false
	}
	switch v.Kind() {
	case reflect.String:
		if n.Tag != "!!str" {
			d.fail(n, path, fmt.Sprintf("quote it if you mean the text: %s", strconv.Quote(n.Value)), "is %s, not text", describe(n))
			return false
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64:
		switch n.Tag {
		case "!!int":
			i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
			if err != nil {
				d.fail(n, path, "use a number clusterforge's limits accept (docs/reference/stack.md)", "%s is out of range", strconv.Quote(n.Value))
				return false
			}
			v.SetInt(i)
		case "!!float":
			if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == math.Trunc(f) && !strings.ContainsAny(n.Value, ".eE") {
				d.fail(n, path, "use a number clusterforge's limits accept (docs/reference/stack.md)", "%s is out of range", strconv.Quote(n.Value))
			} else {
				d.fail(n, path, "write a whole number", "%s is not a whole number", strconv.Quote(n.Value))
			}
			return false
		default:
			d.fail(n, path, "write a plain number without quotes or units, e.g. "+exampleOf(v), "is %s, not a number", describe(n))
			return false
		}
	case reflect.Bool:
		if n.Tag != "!!bool" {
			d.fail(n, path, "write true or false", "is %s, not true or false", describe(n))
			return false
		}
		b, _ := strconv.ParseBool(strings.ToLower(n.Value))
		v.SetBool(b)
	default:
		panic("spec: no decoder for " + v.Type().String())
	}
	return true
}

// describe names what a node holds, for errors; values are quoted and cut short so that nothing
// from the stack, a newline or a pasted key, is echoed whole.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	kind := map[string]string{"!!str": "text", "!!int": "a number", "!!float": "a number", "!!bool": "a boolean"}[n.Tag]
	if kind == "" {
		kind = "a value tagged " + strconv.Quote(n.Tag)
	}
	return kind + " " + Excerpt(n.Value)
}

// Excerpt quotes at most 40 bytes of a value for an error message.
func Excerpt(s string) string {
	if len(s) > 40 {
		return strconv.Quote(s[:40]) + "..."
	}
	return strconv.Quote(s)
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// MapKey spells a map key inside a field path: as is when plain, quoted otherwise.
func MapKey(k string) string {
	if plainKey.MatchString(k) {
		return k
	}
	return Excerpt(k)
}

func exampleOf(v reflect.Value) string {
	if v.Kind() == reflect.Int64 {
		return "8589934592"
	}
	return "10"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}
