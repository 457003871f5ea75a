package booted_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/dataplane"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// startupPods is how many pods BenchmarkPodStartup starts per run.
const startupPods = 100

// BenchmarkPodStartup: create to Running for 100 pods of the preloaded app image on the booted
// workers, each given its pod IP by Azure CNI, in waves as large as the workers' free pod slots
// (maxPods each). Times are this process's: the create call's start to the watch event that shows
// the pod Running. Reports p50 and p99 in milliseconds.
func BenchmarkPodStartup(b *testing.B) {
	if framework.Booted == nil {
		b.Skip("no boot under -short")
	}
	ctx := context.Background()
	cs := drills.Clientset(b, framework.Booted)
	ns := fmt.Sprintf("bench-startup-%d", time.Now().UnixNano())
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	image := framework.PreloadedApp(b)
	for b.Loop() {
		var latencies []time.Duration
		for len(latencies) < startupPods {
			wave := min(startupPods-len(latencies), freePodSlots(b))
			if wave <= 0 {
				b.Fatal("no free pod slot on the workers")
			}
			latencies = append(latencies, startWave(b, ns, image, len(latencies), wave)...)
		}
		slices.Sort(latencies)
		b.ReportMetric(float64(percentile(latencies, 50).Milliseconds()), "p50-ms")
		b.ReportMetric(float64(percentile(latencies, 99).Milliseconds()), "p99-ms")
	}
}

// freePodSlots is what the workers' maxPods leave beside the pods already on them.
func freePodSlots(b *testing.B) int {
	pods, err := drills.Clientset(b, framework.Booted).CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"})
	if err != nil {
		b.Fatal(err)
	}
	free := 0
	for _, m := range framework.Booted.Machines {
		pool, ok := framework.Booted.Cluster.PoolOfRole(m.Role)
		if !ok {
			continue
		}
		free += pool.MaxPods
		for _, p := range pods.Items {
			if p.Spec.NodeName == m.Name {
				free--
			}
		}
	}
	return free
}

// startWave creates n pods at once, times each to Running, and deletes them.
func startWave(b *testing.B, ns, image string, first, n int) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := drills.Clientset(b, framework.Booted)
	label := fmt.Sprintf("wave-%d", first)
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "wave=" + label})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	created := map[string]time.Time{}
	for i := range n {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", first+i), Labels: map[string]string{"wave": label}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "app", Image: image, ImagePullPolicy: corev1.PullNever}}},
		}
		created[pod.Name] = time.Now()
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var out []time.Duration
	running := map[string]bool{}
	for len(running) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("the pod watch ended")
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if ev.Type == watch.Error || !isPod {
				b.Fatalf("pod watch: %v", ev.Object)
			}
			if p.Status.Phase == corev1.PodRunning && !running[p.Name] {
				running[p.Name] = true
				out = append(out, time.Since(created[p.Name]))
			}
		case <-ctx.Done():
			b.Fatalf("%d of %d pods of %s Running after 5 minutes", len(running), n, label)
		}
	}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "wave=" + label}); err != nil {
		b.Fatal(err)
	}
	if err := drills.WaitUntil(2*time.Minute, func() error {
		left, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "wave=" + label})
		if err == nil && len(left.Items) > 0 {
			err = fmt.Errorf("%d pods of %s still there", len(left.Items), label)
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkDNSQuery: 1,000 lookups of kubernetes.default.svc.cluster.local, one after another,
// from a pod's network namespace to the cluster DNS Service (kube-proxy to a CoreDNS pod on either
// worker). Reports p50 and p99 in microseconds.
func BenchmarkDNSQuery(b *testing.B) {
	if framework.Booted == nil {
		b.Skip("no boot under -short")
	}
	cl, _ := dataplane.SharedClients(b)
	r := dataplane.ResolverFrom(cl[0])
	for b.Loop() {
		var latencies []time.Duration
		for range 1000 {
			start := time.Now()
			if _, err := r.LookupHost(context.Background(), "kubernetes.default.svc.cluster.local"); err != nil {
				b.Fatal(err)
			}
			latencies = append(latencies, time.Since(start))
		}
		slices.Sort(latencies)
		b.ReportMetric(float64(percentile(latencies, 50).Microseconds()), "p50-us")
		b.ReportMetric(float64(percentile(latencies, 99).Microseconds()), "p99-us")
	}
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := sort.Search(len(sorted), func(i int) bool { return (i+1)*100 >= p*len(sorted) })
	return sorted[min(i, len(sorted)-1)]
}
