package spec

import (
	"reflect"
	"strings"
	"testing"
)

// Each gallery image's Field is the yaml key of the field its Version points at, read from the
// struct's tags: a renamed key fails here, not in a printed stack line.
func TestGalleryImagesNameTheirFields(t *testing.T) {
	var c Cluster
	v := reflect.ValueOf(&c).Elem()
	for _, g := range GalleryImages {
		found := false
		for i := range v.NumField() {
			if v.Field(i).Addr().UnsafePointer() == reflect.ValueOf(g.Version(&c)).UnsafePointer() {
				found = true
				if key, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); key != g.Field {
					t.Errorf("%s: Field %q, but Version reads the field whose yaml key is %q", g.Definition, g.Field, key)
				}
			}
		}
		if !found {
			t.Errorf("%s: Version points at no top-level field of Cluster", g.Definition)
		}
	}
}
