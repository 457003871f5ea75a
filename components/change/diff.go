// Package change compares what a cluster was last applied with (its resolved spec) with what its
// stack file asks for now, classifies every difference (in place, a roll, or refused) and computes
// the roll's stages. Everything here is a pure function of the two specs: `make diff` prints it,
// `make roll` executes it, the Pulumi program refuses with it. Nothing here imports Pulumi.
package change

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Class says what applying a change takes.
type Class int

const (
	// InPlace: `pulumi up` updates Azure or Kubernetes objects; no machine is replaced.
	InPlace Class = iota
	// Roll: machines must be replaced, one stage at a time, by `make roll`.
	Roll
	// Refused: destructive or not supported; neither `pulumi up` nor `make roll` applies it.
	Refused
)

func (c Class) String() string {
	return [...]string{"in place", "roll", "refused"}[c]
}

// Change is one field that differs between the applied and the desired spec.
type Change struct {
	// Field is the spec path, pools addressed by name: "pools[gpu].vmSize".
	Field string
	// From and To are the applied and desired values as text; "" when absent.
	From, To string
	Class    Class
	// Roles are the machine roles a Roll replaces.
	Roles []string
	// Reason says why the change is so classed and, when refused, what to do instead.
	Reason string
}

func (c Change) String() string {
	s := fmt.Sprintf("%-8s %s: %s -> %s", c.Class, c.Field, show(c.From), show(c.To))
	if len(c.Roles) > 0 {
		s += " [" + strings.Join(c.Roles, ", ") + "]"
	}
	return s + "\n         " + c.Reason
}

func show(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// Diff lists every difference between the applied and the desired cluster, both defaulted and
// valid, in field order, each classified by the rules.
func Diff(applied, desired *spec.Cluster) []Change {
	from, to := leaves(applied), leaves(desired)
	var paths []string
	for p := range from {
		paths = append(paths, p)
	}
	for p := range to {
		if _, ok := from[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var changes []Change
	for _, path := range paths {
		if from[path] == to[path] || inAddedOrRemovedPool(path, from, to) {
			continue
		}
		ch := Change{Field: path, From: from[path], To: to[path]}
		classify(&ch, applied, desired)
		changes = append(changes, ch)
	}
	return changes
}

// inAddedOrRemovedPool: a pool that exists on one side only is one change, its presence; its
// fields would only repeat it.
func inAddedOrRemovedPool(path string, from, to map[string]string) bool {
	if !strings.HasPrefix(path, "pools[") {
		return false
	}
	pool, _, _ := strings.Cut(path, "]")
	pool += "]"
	return path != pool && from[pool] != to[pool]
}

// Worst is the most severe class among changes; InPlace when there are none.
func Worst(changes []Change) Class {
	worst := InPlace
	for _, c := range changes {
		worst = max(worst, c.Class)
	}
	return worst
}

// RolledRoles lists the roles the changes roll, in the order a roll takes them.
func RolledRoles(desired *spec.Cluster, changes []Change) []string {
	var roles []string
	for _, role := range rollOrder(desired) {
		for _, c := range changes {
			if c.Class == Roll && slices.Contains(c.Roles, role) && !slices.Contains(roles, role) {
				roles = append(roles, role)
			}
		}
	}
	return roles
}

// leaves flattens a cluster into field path → value. Pools are keyed by name, so reordering
// them is no change; a pool's presence is its own leaf ("pools[gpu]"), and lists of scalars or
// structs (zones, taints) are one leaf each.
func leaves(c *spec.Cluster) map[string]string {
	out := map[string]string{}
	flatten(reflect.ValueOf(*c), "", out)
	return out
}

func flatten(v reflect.Value, path string, out map[string]string) {
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			flatten(v.Field(i), join(path, name), out)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			flatten(v.Elem(), path, out)
		}
	case reflect.Map:
		keys := v.MapKeys()
		for _, k := range keys {
			out[path+"."+k.String()] = fmt.Sprint(v.MapIndex(k).Interface())
		}
	case reflect.Slice:
		if pools, ok := v.Interface().([]spec.Pool); ok {
			for _, p := range pools {
				at := fmt.Sprintf("%s[%s]", path, p.Name)
				out[at] = "present"
				flatten(reflect.ValueOf(p), at, out)
			}
			return
		}
		if v.Len() > 0 {
			out[path] = fmt.Sprint(v.Interface())
		}
	default:
		if !v.IsZero() {
			out[path] = fmt.Sprint(v.Interface())
		}
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
