package ops

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/ops/teams"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/podsecurity"
)

// The team objects webhook as the add-ons register it (its rules and match conditions), served
// from the test process, against the real apiservers: a team's user and service account are held
// to the stack's sizes; the ReplicaSet controller's pods, from a template the team wrote, are not
// judged.
func TeamObjectsAreCapped(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := framework.Clientset(t)
	ns := drills.TeamNamespace(t, cs, "drill-team-objects", "objects")
	objs, err := framework.Running.AllAddons(azurecloud.Public)
	if err != nil {
		t.Fatal(err)
	}
	var config *admissionregistrationv1.ValidatingWebhookConfiguration
	for _, o := range objs {
		if w, ok := o.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok && w.Name == addons.OpsTeamObjectsWebhook {
			config = w.DeepCopy()
		}
	}
	if config == nil {
		t.Fatalf("the add-ons register no %s", addons.OpsTeamObjectsWebhook)
	}
	sizes := framework.Running.Cluster.Teams
	var mu sync.Mutex
	judged := map[string]int{} // by resource
	server := serveWebhook(t, teams.NewSizes(func(resource string) int64 {
		mu.Lock()
		defer mu.Unlock()
		judged[resource]++
		return sizes.ObjectBytes(resource)
	}, teams.MaxSizeReviews))
	config.Name = "drill-" + config.Name
	config.Webhooks[0].ClientConfig = server.Client
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), config.Name, metav1.DeleteOptions{})
	})

	// The team: a user with edit in the namespace, and a service account of its own.
	const user, account = "drill-objects-user", "drill-objects-trainer"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "edit"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}, {Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: ns}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	member := framework.As(t, rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}})
	trainer := framework.As(t, framework.ServiceAccount(ns, account))
	configMap := func(name string, bytes int64) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"blob": strings.Repeat("x", int(bytes))}}
	}
	server.awaitRegistered(t, func(i int) {
		_, _ = member.CoreV1().ConfigMaps(ns).Create(ctx, configMap("probe", 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	})

	denied := `admission webhook "` + addons.OpsTeamObjectsHook + `" denied the request`
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), denied) {
			t.Errorf("%s: %v, want a refusal by %s", what, err, addons.OpsTeamObjectsHook)
		}
	}
	_, err = member.CoreV1().ConfigMaps(ns).Create(ctx, configMap("large", sizes.MaxDataObjectBytes), metav1.CreateOptions{})
	refused("the team's user writing a ConfigMap of its kind's cap in data", err)
	_, err = trainer.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "large"},
		StringData: map[string]string{"blob": strings.Repeat("x", int(sizes.MaxDataObjectBytes))}}, metav1.CreateOptions{})
	refused("the team's service account writing such a Secret", err)
	fits, err := member.CoreV1().ConfigMaps(ns).Create(ctx, configMap("fits", sizes.MaxDataObjectBytes/2), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a ConfigMap half its kind's cap: %v", err)
	}
	fits.Data["blob"] += strings.Repeat("x", int(sizes.MaxDataObjectBytes/2))
	_, err = member.CoreV1().ConfigMaps(ns).Update(ctx, fits, metav1.UpdateOptions{})
	refused("that ConfigMap grown to its cap", err)

	// A Deployment's template over the cap is refused; one under it is taken, and the ReplicaSet
	// and pod the controllers write from it are not judged.
	spec := podsecurity.Restricted(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: framework.Running.Cluster.Versions.PauseImage}}}}).Spec
	deployment := func(name string, padding int64) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
			Replicas: framework.Ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"padding": strings.Repeat("x", int(padding))}}, Spec: spec}}}
	}
	_, err = trainer.AppsV1().Deployments(ns).Create(ctx, deployment("too-large", sizes.MaxObjectBytes), metav1.CreateOptions{})
	refused("a Deployment whose template alone is its kind's cap", err)
	if _, err := trainer.AppsV1().Deployments(ns).Create(ctx, deployment("fits", sizes.MaxObjectBytes/2), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a Deployment half its cap: %v", err)
	}
	if err := drills.WaitUntil(time.Minute, func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=fits"})
		if err == nil && len(pods.Items) != 1 {
			err = fmt.Errorf("%d pods of the Deployment, want 1", len(pods.Items))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if judged["deployments"] == 0 || judged["replicasets"] != 0 || judged["pods"] != 0 {
		t.Errorf("the webhook judged %v: want the team's Deployments, not the controllers' ReplicaSets and pods", judged)
	}
}
