package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/images/builder/rootfs"
	"github.com/clusterforge/clusterforge/images/provisioner/node"
)

// Every option of every component is documented in README.md.
func TestEveryOptionIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prefix string
		typ    reflect.Type
	}{
		{"", reflect.TypeOf(node.Config{})},
		{"preload_image.", reflect.TypeOf(node.PreloadImage{})},
		{"", reflect.TypeOf(rootfs.Config{})},
	} {
		prefix, typ := c.prefix, c.typ
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("mapstructure"), ",")
			if name == "" {
				continue // squashed Packer options and unexported state
			}
			option := prefix + name
			if !strings.Contains(string(readme), "| `"+option+"` |") {
				t.Errorf("option %s (%s) is not in README.md's option tables", option, typ.Name())
			}
		}
	}
}
