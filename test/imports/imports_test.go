// Package imports keeps the rules of the house: every directory's .import-restrictions file says
// which packages below it may import which, and `go list` says what they do import. A rule is a
// test, not a memory (cluster-api keeps its .import-restrictions files for the same reason).
package imports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// restrictionsFile is the name of a directory's rules; they apply to every package below it.
const restrictionsFile = ".import-restrictions"

// rule limits what the packages it selects import. Paths are module-relative (components/spec)
// or, when their first element has a dot, full import paths (github.com/...). A path names a
// package and every package below it.
type rule struct {
	// Packages selects, by a regular expression on the module-relative path, the packages the
	// rule holds; every package below the file's directory when empty.
	Packages string `yaml:"packages"`
	// Allow lists the only packages of the module the selected ones may import directly; when
	// empty, any that Forbid does not name.
	Allow []string `yaml:"allow"`
	// Forbid lists packages the selected ones may not import directly.
	Forbid []string `yaml:"forbid"`
	// ForbidDeps lists packages that may not be among the selected ones' dependencies at any depth
	// (`go list -deps`): what a binary links.
	ForbidDeps []string `yaml:"forbidDeps"`
}

type restrictions struct {
	Rules []rule `yaml:"rules"`
}

type pkg struct {
	ImportPath string
	Dir        string
	Module     *struct{ Path, Dir string }
	Imports    []string
	Deps       []string
}

// violations lists every import that crosses a rule in the module rooted at dir.
func violations(dir string) ([]string, error) {
	files, err := restrictionFiles(dir)
	if err != nil {
		return nil, err
	}
	pkgs, module, err := listPackages(dir)
	if err != nil {
		return nil, err
	}
	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(path, module+"/")
		return r, ok
	}
	under := func(path, prefix string) bool {
		if !strings.Contains(strings.SplitN(prefix, "/", 2)[0], ".") {
			var ok bool
			if path, ok = rel(path); !ok {
				return false
			}
		}
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
	var out []string
	for file, rs := range files {
		scope, err := filepath.Rel(dir, filepath.Dir(file))
		if err != nil {
			return nil, err
		}
		for i, r := range rs.Rules {
			selector, err := regexp.Compile(r.Packages)
			if err != nil {
				return nil, fmt.Errorf("%s: rule %d: %w", file, i+1, err)
			}
			for _, p := range pkgs {
				path, _ := rel(p.ImportPath)
				if (scope != "." && !under(p.ImportPath, filepath.ToSlash(scope))) || !selector.MatchString(path) {
					continue
				}
				for _, imp := range p.Imports {
					if _, inModule := rel(imp); inModule && len(r.Allow) > 0 && !slices.ContainsFunc(r.Allow, func(a string) bool { return under(imp, a) }) {
						out = append(out, fmt.Sprintf("%s imports %s, which %s does not allow", path, imp, file))
					}
					if slices.ContainsFunc(r.Forbid, func(f string) bool { return under(imp, f) }) {
						out = append(out, fmt.Sprintf("%s imports %s, which %s forbids", path, imp, file))
					}
				}
				for _, dep := range p.Deps {
					if slices.ContainsFunc(r.ForbidDeps, func(f string) bool { return under(dep, f) }) {
						out = append(out, fmt.Sprintf("%s links %s, which %s forbids", path, dep, file))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// restrictionFiles reads every .import-restrictions file below dir, testdata and other modules
// left out.
func restrictionFiles(dir string) (map[string]restrictions, error) {
	out := map[string]restrictions{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			// build/ holds what tests and boots leave behind, root filesystems among them.
			if path != dir && (name == "testdata" || name == "build" || strings.HasPrefix(name, ".") || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != restrictionsFile {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var rs restrictions
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&rs); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out[path] = rs
		return nil
	})
	return out, err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// listPackages is `go list -deps` of every package of the module in dir, and the module's path.
func listPackages(dir string) ([]pkg, string, error) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,Module,Imports,Deps", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("go list in %s: %v: %s", dir, err, stderr.String())
	}
	var pkgs []pkg
	module := ""
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, "", err
		}
		pkgs = append(pkgs, p)
		if p.Module != nil && module == "" {
			module = p.Module.Path
		}
	}
	return pkgs, module, nil
}

// The house's rules hold, in the root module and in the images module.
func TestImportRestrictions(t *testing.T) {
	for _, module := range []string{"../..", "../../images"} {
		found, err := violations(module)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range found {
			t.Errorf("%s: %s", module, v)
		}
	}
}

// The checker catches each kind of crossing: a fixture module whose library imports its test
// harness directly, and whose binary links it through the library.
func TestImportRestrictionsCatchACrossing(t *testing.T) {
	found, err := violations(filepath.Join("testdata", "violation"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cmd/app links example.com/violation/harness, which testdata/violation/cmd/.import-restrictions forbids",
		"lib imports example.com/violation/harness, which testdata/violation/.import-restrictions does not allow",
		"lib imports example.com/violation/harness, which testdata/violation/.import-restrictions forbids",
	}
	if !slices.Equal(found, want) {
		t.Errorf("violations:\n  %s\nwant:\n  %s", strings.Join(found, "\n  "), strings.Join(want, "\n  "))
	}
}
