package teams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// QuotaName is the ResourceQuota the platform keeps in every team namespace; a team's edit role
// may read it, not change it.
const QuotaName = "clusterforge-team"

// IsolationName is the NetworkPolicy the platform keeps in every team namespace: the namespace's
// pods take connections from its own pods only. Policies only ever allow, so what a team does to
// its namespace's policies (add one, delete this one, or narrow it with fields of its own, which
// apply keeps) opens or closes its own pods and no one else's.
const IsolationName = "clusterforge-team-isolation"

// ParseQuota reads the hard limits as `clusterforge-ops controller --team-quota` takes them:
// name=quantity pairs, comma-separated.
func ParseQuota(flag string) (corev1.ResourceList, error) {
	hard := corev1.ResourceList{}
	for _, pair := range strings.Split(flag, ",") {
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		q, err := resource.ParseQuantity(value)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("team quota %q: want name=quantity", pair)
		}
		hard[corev1.ResourceName(name)] = q
	}
	return hard, nil
}

// Namespaces keeps what the platform owns in every namespace labelled with a team: QuotaName at
// Hard (when Hard holds limits) and IsolationName.
type Namespaces struct {
	Client kubernetes.Interface
	Hard   corev1.ResourceList
	// Every is how often they are applied again in every team namespace, undoing edits and
	// deletions by anyone but the platform.
	Every time.Duration
	// Logf reports each failure; may be nil.
	Logf func(format string, args ...any)
}

// Run applies them in each team namespace as the informer sees it appear or change, and in all
// of them every q.Every, until ctx ends.
func (q *Namespaces) Run(ctx context.Context, namespaces cache.SharedIndexInformer) error {
	apply := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok && ns.Labels[NamespaceLabel] != "" && ns.DeletionTimestamp == nil {
			if err := q.Apply(ctx, ns.Name); err != nil && q.Logf != nil {
				q.Logf("teams: namespace %s: %v", ns.Name, err)
			}
		}
	}
	reg, err := namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: apply, UpdateFunc: func(_, obj any) { apply(obj) }})
	if err != nil {
		return err
	}
	defer func() { _ = namespaces.RemoveEventHandler(reg) }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(q.Every):
			for _, obj := range namespaces.GetStore().List() {
				apply(obj)
			}
		}
	}
}

// Apply sets the namespace's quota and isolation, by server-side apply: a no-op when they are
// set. Each is applied whatever became of the other: a team that keeps its own isolation from
// coming back (a namespace full of its NetworkPolicies) does not hold its quota back too.
func (q *Namespaces) Apply(ctx context.Context, namespace string) error {
	own := metav1.ApplyOptions{FieldManager: wellknown.OpsName, Force: true}
	var errs []error
	if len(q.Hard) > 0 {
		quota := corev1ac.ResourceQuota(QuotaName, namespace).WithSpec(corev1ac.ResourceQuotaSpec().WithHard(q.Hard))
		if _, err := q.Client.CoreV1().ResourceQuotas(namespace).Apply(ctx, quota, own); err != nil {
			errs = append(errs, fmt.Errorf("quota: %w", err))
		}
	}
	everyPod := metav1ac.LabelSelector()
	isolation := networkingv1ac.NetworkPolicy(IsolationName, namespace).WithSpec(networkingv1ac.NetworkPolicySpec().
		WithPodSelector(everyPod).WithPolicyTypes(networkingv1.PolicyTypeIngress).
		WithIngress(networkingv1ac.NetworkPolicyIngressRule().WithFrom(networkingv1ac.NetworkPolicyPeer().WithPodSelector(everyPod))))
	if _, err := q.Client.NetworkingV1().NetworkPolicies(namespace).Apply(ctx, isolation, own); err != nil {
		errs = append(errs, fmt.Errorf("isolation: %w", err))
	}
	return errors.Join(errs...)
}
