package addons

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// An environment's adjustments survive the trip as patches: patching a fresh copy of the objects
// gives exactly the adjusted objects (a container gets a volume and a variable, a Deployment
// another replica count, CPU requests shrink), and nothing else moves.
func TestPatchesCarryAdjustmentsOver(t *testing.T) {
	c := stacks(t)["dev"]
	deployed := func() []Object {
		objs, err := Deploy(c, Deployed{WebhookServingCA: "ca", OpsWebhookCert: "cert"})
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	before, after := deployed(), deployed()
	adjusted := 0
	for _, o := range after {
		switch w := o.(type) {
		case *appsv1.Deployment:
			w.Spec.Replicas = new(int32)
		case *appsv1.DaemonSet:
			p := &w.Spec.Template.Spec
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "extra", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			p.Containers[0].Env = append(p.Containers[0].Env, corev1.EnvVar{Name: "EXTRA", Value: "1"})
			p.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("7m")
		default:
			continue
		}
		adjusted++
	}
	patches, err := Patches(before, after)
	if err != nil {
		t.Fatal(err)
	}
	if len(patches) != adjusted || adjusted == 0 {
		t.Fatalf("%d patches for %d adjusted objects", len(patches), adjusted)
	}
	fresh := deployed()
	if err := Patch(fresh, patches); err != nil {
		t.Fatal(err)
	}
	for i := range fresh { // as the apiserver would read them
		got, _ := json.Marshal(fresh[i])
		want, _ := json.Marshal(after[i])
		if string(got) != string(want) {
			t.Errorf("%s patched:\n%s\nwant:\n%s", Key(fresh[i]), got, want)
		}
	}
	if err := Patch(deployed(), map[string]string{"Deployment/kube-system/nothing": `{"spec":{"replicas":0}}`}); err == nil || !strings.Contains(err.Error(), "Deployment/kube-system/nothing") {
		t.Errorf("a patch of no object: %v, want refused by its key", err)
	}
}

// A team's own class lies between the borrow class and the add-ons' (the stack's bounds), and the
// team placement policy admits it.
func TestTeamPriorityClassesBetweenBorrowAndSystem(t *testing.T) {
	if BorrowPriorityValue >= spec.MinTeamPriority || spec.MaxTeamPriority >= SystemPriorityValue {
		t.Errorf("team classes may range %d..%d, not strictly between borrow %d and system %d",
			spec.MinTeamPriority, spec.MaxTeamPriority, BorrowPriorityValue, SystemPriorityValue)
	}
	c, err := stacks(t)["dev"].Clone()
	if err != nil {
		t.Fatal(err)
	}
	c.Teams.PriorityClasses = []spec.TeamPriorityClass{{Name: "urgent", Value: 5000}}
	objs := objectsOf(t, c)
	if pc := find[*schedulingv1.PriorityClass](objs, "urgent"); pc == nil || pc.Value != 5000 {
		t.Errorf("the stack's class: %+v", pc)
	}
	if !slices.Contains(TenantPriorityClasses(c), "urgent") {
		t.Errorf("teams may not use the stack's class: %v", TenantPriorityClasses(c))
	}
}

// A hand-off without the webhooks' authority would deploy webhooks that fail every call, closed.
func TestDeployRefusesWebhooksNoOneCanVerify(t *testing.T) {
	c := stacks(t)["dev"]
	if _, err := Deploy(c, Deployed{OpsWebhookCert: "cert"}); err == nil || !strings.Contains(err.Error(), "no authority") {
		t.Errorf("Deploy with no webhook serving authority: %v, want a refusal", err)
	}
}

// Each pool has a join token Secret of its own, as the apiserver's bootstrap authenticator reads
// it: its pool's token, in every join token's group and its pool's; without a seed, none.
func TestJoinTokenSecretsOnePerPool(t *testing.T) {
	c := stacks(t)["dev"]
	const seed = "0123456789abcdefghijklmnopqrstuv"
	expires := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	secrets, err := JoinTokenSecrets(c, seed, expires)
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets) != len(c.Pools) {
		t.Fatalf("%d join token Secrets for %d pools", len(secrets), len(c.Pools))
	}
	for i, p := range c.Pools {
		s := secrets[i]
		id, secret, _ := strings.Cut(pki.JoinToken(seed, p.Name), ".")
		want := map[string]string{"token-id": id, "token-secret": secret, "expiration": "2026-03-02T00:00:00Z", "usage-bootstrap-authentication": "true",
			"auth-extra-groups": "system:bootstrappers:clusterforge:worker,system:bootstrappers:clusterforge:worker:pool:" + p.Name}
		for k, v := range want {
			if s.StringData[k] != v {
				t.Errorf("pool %s's Secret: %s is %q, want %q", p.Name, k, s.StringData[k], v)
			}
		}
		if s.Name != "bootstrap-token-"+id || s.Namespace != "kube-system" || s.Type != "bootstrap.kubernetes.io/token" {
			t.Errorf("pool %s's Secret is %s %s/%s", p.Name, s.Type, s.Namespace, s.Name)
		}
	}
	if _, err := JoinTokenSecrets(c, "", expires); err == nil {
		t.Error("join token Secrets without a seed")
	}
}
