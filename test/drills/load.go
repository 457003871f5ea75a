package drills

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Writer creates ConfigMaps through the load balancer until stopped and records when each create
// was acknowledged: only acknowledged writes are owed, and a drill owes every one.
type Writer struct {
	ns      string
	stopped sync.Once
	mu      sync.Mutex
	acked   map[string]time.Time
	stop    chan struct{}
	done    chan struct{}
}

// StartWriter starts writing into namespace ns.
func StartWriter(cs *kubernetes.Clientset, ns string) *Writer {
	w := &Writer{ns: ns, acked: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			name := fmt.Sprintf("write-%d", i)
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			cancel()
			if err == nil {
				w.mu.Lock()
				w.acked[name] = time.Now()
				w.mu.Unlock()
			} else {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return w
}

// Stop stops writing and returns every acknowledged write with its time.
func (w *Writer) Stop() map[string]time.Time {
	w.stopped.Do(func() { close(w.stop) })
	<-w.done
	return w.acked
}

// Acked is the number of writes acknowledged so far.
func (w *Writer) Acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// Lost lists the acknowledged writes the cluster no longer has: those acknowledged before it
// looks, so a write acknowledged during the list is not counted.
func (w *Writer) Lost(t testing.TB, cs *kubernetes.Clientset) []string {
	t.Helper()
	w.mu.Lock()
	owed := maps.Clone(w.acked)
	w.mu.Unlock()
	list, err := cs.CoreV1().ConfigMaps(w.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, cm := range list.Items {
		stored[cm.Name] = true
	}
	var lost []string
	for name := range owed {
		if !stored[name] {
			lost = append(lost, name)
		}
	}
	slices.Sort(lost)
	return lost
}

// Prober reads the default namespace through the load balancer at a fixed rate, each read
// bounded by a timeout, and counts the answers: the API's availability as a client sees it.
type Prober struct {
	stopped  sync.Once
	mu       sync.Mutex
	ok, fail int
	failures []string
	stop     chan struct{}
	done     chan struct{}
}

// StartProber probes perSecond times a second; a probe fails on an error or after timeout.
func StartProber(cs *kubernetes.Clientset, perSecond int, timeout time.Duration) *Prober {
	p := &Prober{stop: make(chan struct{}), done: make(chan struct{})}
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	var wg sync.WaitGroup
	go func() {
		defer close(p.done)
		defer wg.Wait()
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case at := <-tick.C:
				wg.Add(1)
				go func() { // a slow probe does not delay the next
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					defer cancel()
					_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
					p.mu.Lock()
					defer p.mu.Unlock()
					if err == nil {
						p.ok++
					} else {
						p.fail++
						p.failures = append(p.failures, at.Format("15:04:05.000")+" "+err.Error())
					}
				}()
			}
		}
	}()
	return p
}

// Window counts the probes since the last call and starts a new window.
func (p *Prober) Window() (ok, fail int, failures []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok, fail, failures = p.ok, p.fail, p.failures
	p.ok, p.fail, p.failures = 0, 0, nil
	return ok, fail, failures
}

// Stop stops probing.
func (p *Prober) Stop() {
	p.stopped.Do(func() { close(p.stop) })
	<-p.done
}
