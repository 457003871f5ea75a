// Package pulumilocal runs the Pulumi engine this machine built (.tools/bin: the CLI, the Go
// language host, the Kubernetes provider) against a local file backend with a passphrase secrets
// provider, both under one directory of build/: no login, no network. It holds the two stacks of a
// booted environment: the infrastructure's stand-in, whose only output is the handoff the booted
// machines give (Azure's infrastructure cannot run here), and the real cluster services stack.
package pulumilocal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"golang.org/x/mod/modfile"
	"gopkg.in/yaml.v3"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/handoff"
	"github.com/clusterforge/clusterforge/infra/services"
)

// Backend is one environment's local Pulumi backend.
type Backend struct {
	// Repo is the repository's root: its go.mod and services/Pulumi.yaml.
	Repo string
	// Tools holds the engine's binaries (.tools/bin).
	Tools string
	// Dir holds the state, the passphrase, PULUMI_HOME and the projects' local copies.
	Dir string
	// Stack is the stack name both projects use: the environment's.
	Stack string
}

// New is the backend of an environment under dir, for the repository tools (.tools/bin) is part of.
func New(tools, dir, stack string) (*Backend, error) {
	tools, err := filepath.Abs(tools)
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	repo := filepath.Dir(filepath.Dir(tools))
	if _, err := os.Stat(filepath.Join(repo, services.Dir, "Pulumi.yaml")); err != nil {
		return nil, fmt.Errorf("%s is not a clusterforge checkout's .tools/bin: %w", tools, err)
	}
	return &Backend{Repo: repo, Tools: tools, Dir: dir, Stack: stack}, nil
}

func (b *Backend) passphraseFile() string { return filepath.Join(b.Dir, "passphrase") }
func (b *Backend) home() string           { return filepath.Join(b.Dir, "home") }

// ServicesDir is the services project's local copy, where every CLI command runs.
func (b *Backend) ServicesDir() string { return filepath.Join(b.Dir, services.Dir) }

// ServicesConfig is the services stack's config file in that copy.
func (b *Backend) ServicesConfig() string {
	return filepath.Join(b.ServicesDir(), "Pulumi."+b.Stack+".yaml")
}

// Env is the environment every engine run gets: the state, secrets and plugins under Dir, the
// engine's binaries first on PATH, no update checks and no plugin downloads.
func (b *Backend) Env() map[string]string {
	return map[string]string{
		"PATH":                          b.Tools + string(os.PathListSeparator) + os.Getenv("PATH"),
		"PULUMI_HOME":                   b.home(),
		"PULUMI_BACKEND_URL":            "file://" + filepath.Join(b.Dir, "state"),
		"PULUMI_CONFIG_PASSPHRASE_FILE": b.passphraseFile(),
		"PULUMI_SKIP_UPDATE_CHECK":      "true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		// The provider from the plugins Setup installed, not from PATH.
		"PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
	}
}

// Environ is this process's environment with Env, and no passphrase of the caller's shell (it
// would take precedence over the file).
func (b *Backend) Environ() []string {
	out := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PULUMI_CONFIG_PASSPHRASE=") })
	for k, v := range b.Env() {
		out = append(out, k+"="+v)
	}
	return out
}

// Setup makes the backend's directories and passphrase (once) and installs the Kubernetes
// provider as the plugin release the program's SDK asks for.
func (b *Backend) Setup(ctx context.Context) error {
	for _, d := range []string{b.home(), filepath.Join(b.Dir, "state"), b.ServicesDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if _, err := os.Stat(b.passphraseFile()); errors.Is(err, os.ErrNotExist) {
		phrase := make([]byte, 32)
		if _, err := rand.Read(phrase); err != nil {
			return err
		}
		if err := os.WriteFile(b.passphraseFile(), []byte(hex.EncodeToString(phrase)), 0o600); err != nil {
			return err
		}
	}
	version, err := b.kubernetesSDK()
	if err != nil {
		return err
	}
	// Installed on every set-up: a rebuilt provider replaces the one installed before.
	return b.run(ctx, b.Dir, io.Discard, "plugin", "install", "resource", "kubernetes", version, "--reinstall", "--file", filepath.Join(b.Tools, "pulumi-resource-kubernetes"))
}

// kubernetesSDK is the pulumi-kubernetes SDK release go.mod requires, which the program's
// resources ask the engine for.
func (b *Backend) kubernetesSDK() (string, error) {
	data, err := os.ReadFile(filepath.Join(b.Repo, "go.mod"))
	if err != nil {
		return "", err
	}
	f, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil {
		return "", err
	}
	for _, r := range f.Require {
		if r.Mod.Path == "github.com/pulumi/pulumi-kubernetes/sdk/v4" {
			return strings.TrimPrefix(r.Mod.Version, "v"), nil
		}
	}
	return "", fmt.Errorf("go.mod requires no pulumi-kubernetes SDK")
}

// ExportInfrastructure runs the infrastructure stack's stand-in: `pulumi up` of
// InfrastructureStack.
func (b *Backend) ExportInfrastructure(ctx context.Context, h handoff.Infrastructure, progress io.Writer) error {
	stack, err := b.InfrastructureStack(ctx, h)
	if err != nil {
		return err
	}
	_, err = stack.Up(ctx, optup.ProgressStreams(progress), optup.SuppressProgress())
	return err
}

// InfrastructureStack is the infrastructure stack's stand-in, through the Automation API: a stack
// of the infrastructure's project and this backend's stack name whose program's only output is
// the handoff h (the Azure half cannot run here).
func (b *Backend) InfrastructureStack(ctx context.Context, h handoff.Infrastructure) (auto.Stack, error) {
	cmd, err := b.command()
	if err != nil {
		return auto.Stack{}, err
	}
	dir := filepath.Join(b.Dir, "infrastructure")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return auto.Stack{}, err
	}
	return auto.UpsertStackInlineSource(ctx, b.Stack, handoff.InfrastructureProject, func(ctx *pulumi.Context) error {
		return handoff.ExportValue(ctx, h)
	}, auto.Pulumi(cmd), auto.WorkDir(dir), auto.EnvVars(b.Env()), auto.SecretsProvider("passphrase"),
		auto.Project(workspace.Project{Name: handoff.InfrastructureProject, Runtime: workspace.NewProjectRuntimeInfo("go", nil)}))
}

// ServicesStack is the services stack, through the Automation API, in its local copy (WriteServices).
func (b *Backend) ServicesStack(ctx context.Context) (auto.Stack, error) {
	cmd, err := b.command()
	if err != nil {
		return auto.Stack{}, err
	}
	return auto.SelectStackLocalSource(ctx, b.Stack, b.ServicesDir(), auto.Pulumi(cmd), auto.EnvVars(b.Env()))
}

// command is the CLI of .tools/bin for the Automation API.
func (b *Backend) command() (auto.PulumiCommand, error) {
	return auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: filepath.Dir(b.Tools), SkipVersionCheck: true})
}

// WriteServices writes the services project's local copy: its Pulumi.yaml, running the
// repository's program, and the stack's config file, stackFile's contents (a stack file of
// stacks/) with the encryption salt this backend's earlier runs wrote kept.
func (b *Backend) WriteServices(stackFile []byte) error {
	var project map[string]any
	data, err := os.ReadFile(filepath.Join(b.Repo, services.Dir, "Pulumi.yaml"))
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, &project); err != nil {
		return err
	}
	main, _ := project["main"].(string)
	project["main"] = filepath.Join(b.Repo, services.Dir, main)
	delete(project, "stackConfigDir")
	out, err := yaml.Marshal(project)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.ServicesDir(), "Pulumi.yaml"), out, 0o600); err != nil {
		return err
	}
	config := bytes.TrimRight(stackFile, "\n")
	if old, err := os.ReadFile(b.ServicesConfig()); err == nil {
		if salt := saltLine.Find(old); salt != nil {
			config = append(append(config, '\n'), salt...)
		}
	}
	return os.WriteFile(b.ServicesConfig(), append(config, '\n'), 0o600)
}

var saltLine = regexp.MustCompile(`(?m)^encryptionsalt: .*$`)

// StackFile is a stack file holding cluster c's spec (spec.Cluster.Resolved): what a roll's
// desired spec applies with.
func StackFile(c *spec.Cluster) ([]byte, error) {
	resolved, err := c.Resolved()
	if err != nil {
		return nil, err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(resolved, &node); err != nil {
		return nil, err
	}
	return yaml.Marshal(map[string]any{"config": map[string]any{spec.ConfigKey: node.Content[0]}})
}

// Pulumi runs the CLI in the services project's copy on this backend's stack, its output to out.
func (b *Backend) Pulumi(ctx context.Context, out io.Writer, args ...string) error {
	return b.run(ctx, b.ServicesDir(), out, append(args, "--stack", b.Stack, "--non-interactive")...)
}

func (b *Backend) run(ctx context.Context, dir string, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(b.Tools, "pulumi"), args...)
	cmd.Dir, cmd.Env = dir, b.Environ()
	var tail bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(out, &tail), io.MultiWriter(out, &tail)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pulumi %s: %w\n%s", strings.Join(args, " "), err, lastLines(tail.String(), 30))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
