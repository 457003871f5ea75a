package rootfs

import "os"

// Artifact is the root filesystem tarball.
type Artifact struct {
	Tarball       string
	generatedData map[string]interface{}
}

func (a *Artifact) BuilderId() string { return BuilderID }
func (a *Artifact) Files() []string   { return []string{a.Tarball} }
func (a *Artifact) Id() string        { return a.Tarball }
func (a *Artifact) String() string    { return "root filesystem tarball: " + a.Tarball }
func (a *Artifact) Destroy() error    { return os.Remove(a.Tarball) }

func (a *Artifact) State(name string) interface{} {
	if name == "generated_data" {
		return a.generatedData
	}
	return nil
}
