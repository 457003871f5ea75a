package services

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/clusteraddons"
	"github.com/clusterforge/clusterforge/infra/handoff"
	"github.com/clusterforge/clusterforge/infra/program"
	"github.com/clusterforge/clusterforge/infra/rollazure"
	"github.com/clusterforge/clusterforge/infra/services"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/pulumilocal"
)

// The cluster services stack under the real engine (the CLI, the Go language host and the
// Kubernetes provider built here, a local backend): the boot's `pulumi up` applied every add-on
// (the apiserver records the provider as their fields' manager); a second `up` changes nothing; a
// stack edit previews as exactly the objects it changes and `up` applies them; the roller drives
// both stacks through the Automation API (the infrastructure's stand-in); a hand edit is
// found by `refresh`; the state holds no secret in the clear; a second `up` meanwhile is refused
// by the stack's lock.
func ServicesStackUnderTheEngine(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	be, err := framework.Booted.Pulumi()
	if err != nil {
		t.Fatal(err)
	}
	pulumi := func(t *testing.T, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := be.Pulumi(ctx, &out, args...); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	applied := framework.Booted.Cluster
	writeStack := func(t *testing.T, c *spec.Cluster) {
		t.Helper()
		data, err := pulumilocal.StackFile(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := be.WriteServices(data); err != nil {
			t.Fatal(err)
		}
	}
	writeStack(t, applied)
	cs, err := framework.Booted.Clientset()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("up applied every add-on", func(t *testing.T) {
		objs, err := addons.Deploy(applied, framework.Booted.Deployed(framework.Booted.Cloud()))
		if err != nil {
			t.Fatal(err)
		}
		var state struct {
			Deployment struct {
				Resources []struct {
					URN     string         `json:"urn"`
					Type    string         `json:"type"`
					Outputs map[string]any `json:"outputs"`
				} `json:"resources"`
			} `json:"deployment"`
		}
		if err := json.Unmarshal([]byte(pulumi(t, "stack", "export")), &state); err != nil {
			t.Fatal(err)
		}
		inState := map[string]bool{}
		for _, r := range state.Deployment.Resources {
			if strings.HasPrefix(r.Type, "kubernetes:") && !strings.HasPrefix(r.Type, "kubernetes:providers") {
				inState[r.URN[strings.LastIndex(r.URN, "::")+2:]] = true
			}
		}
		rs, err := clusteraddons.Resources(applied.Name+"-addons", objs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if !inState[r.Name] {
				t.Errorf("%s is not in the stack's state", addons.Key(objs[i]))
				continue
			}
			managers, err := framework.Booted.FieldManagers(ctx, objs[i])
			if err != nil {
				t.Errorf("%s: %v", addons.Key(objs[i]), err)
			} else if !slices.ContainsFunc(managers, func(m string) bool { return strings.HasPrefix(m, "pulumi-kubernetes") }) {
				t.Errorf("%s in the cluster was applied by %v, not by pulumi-kubernetes", addons.Key(objs[i]), managers)
			}
		}
		if len(rs) < 50 {
			t.Errorf("only %d add-on objects", len(rs))
		}
		// The join tokens the workers joined with, one a pool, valid until the plan's expiry (the
		// token cleaner deletes an expired one at once), each authenticating into its pool's group.
		for _, p := range framework.Booted.Cluster.Pools {
			id, _, _ := strings.Cut(pki.JoinToken(framework.Booted.Bundle.JoinSeed, p.Name), ".")
			token, err := cs.CoreV1().Secrets(addons.SystemNamespace).Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("pool %s's join token's Secret: %v", p.Name, err)
			}
			if expires, err := time.Parse(time.RFC3339, string(token.Data["expiration"])); err != nil || !expires.Equal(framework.Booted.Bundle.BootstrapTokenExpires) {
				t.Errorf("pool %s's join token expires %q, want %s", p.Name, token.Data["expiration"], framework.Booted.Bundle.BootstrapTokenExpires)
			}
			if groups := strings.Split(string(token.Data["auth-extra-groups"]), ","); !slices.Contains(groups, pki.PoolJoinGroup(p.Name)) {
				t.Errorf("pool %s's join token authenticates into %v, not its pool's group", p.Name, groups)
			}
		}
	})

	t.Run("a second up changes nothing", func(t *testing.T) {
		pulumi(t, "preview", "--expect-no-changes")
		pulumi(t, "up", "--yes", "--expect-no-changes", "--skip-preview")
	})

	t.Run("a stack edit previews as what it changes and up applies it", func(t *testing.T) {
		edited, err := applied.Clone()
		if err != nil {
			t.Fatal(err)
		}
		edited.DNS.Replicas = applied.DNS.Replicas + 1
		edited.Teams.PriorityClasses = append(edited.Teams.PriorityClasses, spec.TeamPriorityClass{Name: "urgent", Value: 5000})
		writeStack(t, edited)
		defer func() { // the cluster as booted, for the tests after this one
			writeStack(t, applied)
			pulumi(t, "up", "--yes", "--skip-preview")
		}()
		want := changedResources(t, applied, edited)
		for _, name := range []string{applied.Name + "-addons-deployment-kube-system-" + addons.DNSName, applied.Name + "-addons-priorityclass-urgent"} {
			if !slices.Contains(want, name) {
				t.Fatalf("the rendering of the edit does not change %s: %v", name, want)
			}
		}
		if got := previewChanges(t, pulumi(t, "preview", "--json")); !slices.Equal(got, want) {
			t.Errorf("preview changes %v, want exactly %v", got, want)
		}
		pulumi(t, "up", "--yes", "--skip-preview")
		dns, err := cs.AppsV1().Deployments(addons.SystemNamespace).Get(ctx, addons.DNSName, metav1.GetOptions{})
		if err != nil || *dns.Spec.Replicas != int32(edited.DNS.Replicas) {
			t.Errorf("CoreDNS after up: %v, want %d replicas", err, edited.DNS.Replicas)
		}
		if pc, err := cs.SchedulingV1().PriorityClasses().Get(ctx, "urgent", metav1.GetOptions{}); err != nil || pc.Value != 5000 {
			t.Errorf("the new priority class after up: %v %v", pc, err)
		}
	})

	t.Run("the roller drives both stacks through the Automation API", func(t *testing.T) {
		edited, err := applied.Clone()
		if err != nil {
			t.Fatal(err)
		}
		edited.DNS.Replicas = applied.DNS.Replicas + 1 // one per node: the workers hold one more
		writeStack(t, edited)
		defer func() {
			writeStack(t, applied)
			pulumi(t, "up", "--yes", "--skip-preview")
		}()
		h, err := framework.Booted.Handoff()
		if err != nil {
			t.Fatal(err)
		}
		infrastructure, err := be.InfrastructureStack(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		cluster, err := be.ServicesStack(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var progress bytes.Buffer
		target := &rollazure.Target{Cluster: edited, StackName: be.Stack, Project: program.Project,
			Stack: &infrastructure, Services: &cluster, Progress: &progress}
		if err := target.Prepare(ctx); err != nil {
			t.Fatalf("%v\n%s", err, progress.String())
		}
		if step, err := infrastructure.GetConfig(ctx, program.RollStepKey); err != nil || !strings.HasPrefix(step.Value, program.RollModels) {
			t.Errorf("the infrastructure's roll step after Prepare: %+v %v", step, err)
		}
		dns, err := cs.AppsV1().Deployments(addons.SystemNamespace).Get(ctx, addons.DNSName, metav1.GetOptions{})
		if err != nil || *dns.Spec.Replicas != int32(edited.DNS.Replicas) {
			t.Errorf("CoreDNS after Prepare: %v, want %d replicas", err, edited.DNS.Replicas)
		}
		if err := target.Commit(ctx); err != nil {
			t.Fatalf("%v\n%s", err, progress.String())
		}
		if _, err := infrastructure.GetConfig(ctx, program.RollStepKey); err == nil {
			t.Errorf("the roll step is still set after Commit")
		}
	})

	t.Run("refresh finds a hand edit", func(t *testing.T) {
		patch := []byte(`{"metadata":{"labels":{"edited-by":"hand"}},"description":"edited by hand"}`)
		if _, err := cs.SchedulingV1().PriorityClasses().Patch(ctx, addons.SystemPriority, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		pulumi(t, "refresh", "--yes", "--skip-preview")
		name := applied.Name + "-addons-priorityclass-" + addons.SystemPriority
		if got := stateOutput(t, pulumi(t, "stack", "export"), name, "description"); got != "edited by hand" {
			t.Errorf("after the refresh, the state's description is %q, want the hand edit's", got)
		}
		want := []string{name}
		if got := previewChanges(t, pulumi(t, "preview", "--json")); !slices.Equal(got, want) {
			t.Errorf("after the refresh, preview changes %v, want %v", got, want)
		}
		pulumi(t, "up", "--yes", "--skip-preview")
		pc, err := cs.SchedulingV1().PriorityClasses().Get(ctx, addons.SystemPriority, metav1.GetOptions{})
		if err != nil || pc.Description == "edited by hand" {
			t.Errorf("up did not undo the hand edit: %v %+v", err, pc)
		}
	})

	t.Run("secrets stay encrypted in the state", func(t *testing.T) {
		h, err := framework.Booted.Handoff()
		if err != nil {
			t.Fatal(err)
		}
		plain := map[string]string{"the join tokens' seed": h.JoinSeed}
		for _, p := range framework.Booted.Cluster.Pools {
			_, plain["pool "+p.Name+"'s join token's secret"], _ = strings.Cut(pki.JoinToken(h.JoinSeed, p.Name), ".")
		}
		plain["the webhooks' private key"] = strings.Split(strings.TrimSpace(h.OpsWebhookKey), "\n")[1]
		files, err := filepath.Glob(filepath.Join(be.Dir, "state", ".pulumi", "stacks", "*", "*.json"))
		if err != nil || len(files) != 2 {
			t.Fatalf("the two stacks' state files: %v %v", files, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for what, value := range plain {
				if bytes.Contains(data, []byte(value)) {
					t.Errorf("%s holds %s in the clear", f, what)
				}
			}
			if !bytes.Contains(data, []byte(`"ciphertext"`)) {
				t.Errorf("%s holds no encrypted value", f)
			}
		}
	})

	t.Run("a second up meanwhile is refused by the lock", func(t *testing.T) {
		first := exec.CommandContext(ctx, filepath.Join(be.Tools, "pulumi"), "up", "--yes", "--skip-preview", "--stack", be.Stack, "--non-interactive")
		first.Dir, first.Env = be.ServicesDir(), be.Environ()
		var firstOut bytes.Buffer
		first.Stdout, first.Stderr = &firstOut, &firstOut
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		locks := filepath.Join(be.Dir, "state", ".pulumi", "locks", handoff.SelfManagedOrganization, services.Project, be.Stack, "*.json")
		if err := machines.Poll(ctx, time.Minute, "the first up's lock", func(context.Context) error {
			if held, _ := filepath.Glob(locks); len(held) == 0 {
				return os.ErrNotExist
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var second bytes.Buffer
		err := be.Pulumi(ctx, &second, "up", "--yes", "--skip-preview")
		if err == nil || !strings.Contains(second.String(), "the stack is currently locked") {
			t.Errorf("a second up while the first runs: %v\n%s", err, second.String())
		}
		if err := first.Wait(); err != nil {
			t.Errorf("the first up: %v\n%s", err, firstOut.String())
		}
	})
}

// changedResources are the Pulumi resources of the add-on objects that differ between two
// clusters' renderings, sorted: what a stack edit from one to the other changes.
func changedResources(t *testing.T, from, to *spec.Cluster) []string {
	t.Helper()
	render := func(c *spec.Cluster) map[string]string {
		objs, err := addons.Deploy(c, framework.Booted.Deployed(framework.Booted.Cloud()))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := clusteraddons.Resources(c.Name+"-addons", objs)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for i, r := range rs {
			data, _ := json.Marshal(objs[i])
			out[r.Name] = string(data)
		}
		return out
	}
	before, after := render(from), render(to)
	var out []string
	for name, obj := range after {
		if before[name] != obj {
			out = append(out, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// stateOutput is an output field of the named resource in a `pulumi stack export`.
func stateOutput(t *testing.T, export, name, field string) any {
	t.Helper()
	var state struct {
		Deployment struct {
			Resources []struct {
				URN     string         `json:"urn"`
				Outputs map[string]any `json:"outputs"`
			} `json:"resources"`
		} `json:"deployment"`
	}
	if err := json.Unmarshal([]byte(export), &state); err != nil {
		t.Fatal(err)
	}
	for _, r := range state.Deployment.Resources {
		if strings.HasSuffix(r.URN, "::"+name) {
			return r.Outputs[field]
		}
	}
	t.Fatalf("%s is not in the state", name)
	return nil
}

// previewChanges are the resources `pulumi preview --json` would create, update, replace or
// delete, by name, sorted.
func previewChanges(t *testing.T, preview string) []string {
	t.Helper()
	var p struct {
		Steps []struct {
			Op  string `json:"op"`
			URN string `json:"urn"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(preview), &p); err != nil {
		t.Fatalf("%v\n%s", err, preview)
	}
	var out []string
	for _, s := range p.Steps {
		if s.Op != "same" && s.Op != "read" {
			out = append(out, s.URN[strings.LastIndex(s.URN, "::")+2:])
		}
	}
	slices.Sort(out)
	return out
}
