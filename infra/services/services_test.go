package services

import (
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/clusterforge/clusterforge/components/spec"
)

// The project file names this project, runs this program's main and reads the same stack files
// as the infrastructure.
func TestProjectFileIsThisProgram(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", Dir, "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var project struct {
		Name, Runtime, Main string
		StackConfigDir      string `yaml:"stackConfigDir"`
	}
	if err := yaml.Unmarshal(data, &project); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join("..", "..", Dir, project.Main)
	if _, err := os.Stat(filepath.Join(main, "main.go")); err != nil || filepath.Base(main) != "clusterforge-services" {
		t.Errorf("main %q is not cmd/clusterforge-services: %v", project.Main, err)
	}
	if project.Name != Project || project.Runtime != "go" || project.StackConfigDir != filepath.Join("..", spec.StackDir) {
		t.Errorf("%s/Pulumi.yaml: %+v, want project %s, runtime go, stack files in ../%s", Dir, project, Project, spec.StackDir)
	}
}
