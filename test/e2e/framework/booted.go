package framework

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/offline"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/nspawn"
)

// What BootMain gives the scenarios on booted machines.
var (
	// Booted is -stack's machines, booted from their baked images; nil under -short.
	Booted *nspawn.Booted
	// PlanDir is the offline plan the machines booted from: build/boot-check/plan/<stack>.
	PlanDir string
)

// BootMain plans -stack into build/boot-check/plan, boots it as cfboot-<stack>-check from the
// images `make images-local` baked, runs the package's tests on it and takes it down; it returns
// the exit code. It first serves the stand-ins when the test binary was started as one.
func BootMain(m *testing.M) int {
	// The boot runs its load balancer, metadata service and host forwarder as `<this binary> lb|imds|forward ...`.
	machines.ServeSubcommand()
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "boot check:", err); return 1 }
	if os.Geteuid() != 0 {
		return fail(fmt.Errorf("needs root: it mounts, makes loop devices and network namespaces, and runs systemd-nspawn (or go test -short)"))
	}
	var err error
	if RepoRoot, err = findRepoRoot(); err != nil {
		return fail(err)
	}
	stackFile := spec.StackFile(filepath.Join(RepoRoot, spec.StackDir), *stackName)
	c, err := spec.LoadStack(stackFile)
	if err != nil {
		return fail(err)
	}
	Cluster = c
	work := filepath.Join(RepoRoot, "build", "boot-check")
	if _, err := offline.WriteStack(*stackName, stackFile, filepath.Join(work, "plan")); err != nil {
		return fail(err)
	}
	PlanDir = filepath.Join(work, "plan", *stackName)
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	images := filepath.Join(RepoRoot, "build", "images")
	o := nspawn.Options{
		Stack: *stackName, Name: *stackName + "-check", Dir: filepath.Join(work, *stackName), Self: []string{self},
		Tools: filepath.Join(RepoRoot, ".tools", "bin"), PlanDir: PlanDir, PKIFile: filepath.Join(work, "plan", *stackName+".pki.json"),
		Images: map[string]string{
			machine.ImageWorker:       filepath.Join(images, "node-"+*stackName+".tar"),
			machine.ImageControlPlane: filepath.Join(images, "control-plane-"+*stackName+".tar"),
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if Booted, err = nspawn.Boot(ctx, c, o, os.Stderr); err != nil {
		return fail(err)
	}
	code := m.Run()
	if code != 0 {
		Booted.SaveJournals()
		fmt.Fprintf(os.Stderr, "boot check: journals of every machine in %s\n", filepath.Join(o.Dir, "logs"))
	}
	if err := Booted.Down(); err != nil {
		return fail(err)
	}
	return code
}

// NeedBoot skips a scenario on booted machines when none were booted (-short).
func NeedBoot(t testing.TB) {
	t.Helper()
	if Booted == nil {
		t.Skip("no boot under -short")
	}
}

// WorkerNames are the booted worker machines' names.
func WorkerNames() []string {
	var workers []string
	for _, m := range Booted.Machines {
		if m.Image == machine.ImageWorker {
			workers = append(workers, m.Name)
		}
	}
	return workers
}

// FirstWorker names a booted worker machine.
func FirstWorker(t testing.TB) string {
	t.Helper()
	if workers := WorkerNames(); len(workers) > 0 {
		return workers[0]
	}
	t.Fatal("no worker machine was booted")
	return ""
}

// Preloaded is the worker image's preload list as its local bake wrote it (images/cmd/mkimages, then
// images/testenv/testapp): the images and the digests it expects.
type Preloaded []struct{ Name, Digest string }

// PreloadList is the worker image's preload list for -stack.
func PreloadList(t testing.TB) Preloaded {
	t.Helper()
	var list struct {
		PreloadImages Preloaded `json:"preload_images"`
	}
	data, err := os.ReadFile(filepath.Join(RepoRoot, "build", "images", "node-"+*stackName+".preload", "preload.pkrvars.json"))
	if err == nil {
		err = json.Unmarshal(data, &list)
	}
	if err != nil || len(list.PreloadImages) < 2 {
		t.Fatalf("the worker image's preload list: %v, %d images; want the pause image and an app image (make image-local)", err, len(list.PreloadImages))
	}
	return list.PreloadImages
}

// PreloadedApp is the large app image the worker image preloads: the last of the list (testapp appends it).
func PreloadedApp(t testing.TB) string {
	list := PreloadList(t)
	return list[len(list)-1].Name
}

// AsNode is a client with the kubelet's own client certificate, as root on the worker reads it.
func AsNode(t testing.TB, ctx context.Context, worker string) *kubernetes.Clientset {
	t.Helper()
	pair, err := Booted.Exec(ctx, worker, "cat", machine.KubeletClientCert)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: Booted.Cluster.APIServerURL(), Dial: Booted.Dial,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(Booted.Bundle.Pair(pki.ClusterCA).CertPEM), CertData: []byte(pair), KeyData: []byte(pair)}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
