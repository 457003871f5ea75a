package machine

import (
	"reflect"
	"strings"
	"testing"
)

// No clusterforge service of any machine starts before the image check has passed: each requires
// it, through the identity step or a unit that does, so a machine booted on an image baked with
// other releases starts nothing of ours. Removing the join token (its path unit waits for a
// client certificate such a machine never gets) is the one that need not wait.
func TestEveryServiceWaitsForTheImageCheck(t *testing.T) {
	for _, m := range renderAll(t, testCluster(t)) {
		requires := map[string][]string{}
		for _, u := range m.Units {
			for _, line := range strings.Split(u.Content, "\n") {
				if deps, ok := strings.CutPrefix(line, "Requires="); ok {
					requires[u.Name] = append(requires[u.Name], strings.Fields(deps)...)
				}
			}
		}
		var waits func(unit string, seen map[string]bool) bool
		waits = func(unit string, seen map[string]bool) bool {
			if unit == ImageCheckUnit {
				return true
			}
			if seen[unit] {
				return false
			}
			seen[unit] = true
			for _, dep := range requires[unit] {
				if waits(dep, seen) {
					return true
				}
			}
			return false
		}
		for _, u := range m.Units {
			if strings.HasSuffix(u.Name, ".service") && u.Name != ImageCheckUnit && u.Name != forgetBootstrapUnit+".service" && !waits(u.Name, map[string]bool{}) {
				t.Errorf("%s: %s starts without the image check", m.Role, u.Name)
			}
		}
	}
}

// The releases an image carries are named by the stack's own fields: each key of ImageVersions
// is the yaml name of a spec.Versions field, and its value that field's.
func TestImageVersionsAreTheStacksFields(t *testing.T) {
	v := testCluster(t).Versions
	fields := map[string]string{}
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		if s, ok := rv.Field(i).Interface().(string); ok {
			fields[strings.Split(rv.Type().Field(i).Tag.Get("yaml"), ",")[0]] = s
		}
	}
	for _, image := range ImageRoles {
		for key, release := range ImageVersions(v, image) {
			if got, ok := fields[key]; !ok || got != release {
				t.Errorf("%s image: versions.%s = %q is not the stack's field (%q, present %v)", image, key, release, got, ok)
			}
		}
	}
}
