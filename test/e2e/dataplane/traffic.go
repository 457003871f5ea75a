package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/netns"
)

// Traffic accounting (L32): a pod sends 8 MiB to a pod on another worker. The sender's agent
// counts at least that much transmitted by the sender and the receiver's agent as much received
// by the receiver, neither much more than the payload; no other namespace's pod is charged a
// share of it; and Prometheus, scraping every agent, sums it under the senders' namespace.
func PodTrafficIsCountedByNamespace(t *testing.T) {
	framework.NeedBoot(t)
	// Clients of its own: the shared ones may be gone by now (drains and rolls replace pods).
	const ns = "boot-traffic"
	cs := drills.Clientset(t, framework.Booted)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	cl, err := StartClients(cs, ns)
	if err != nil {
		t.Fatal(err)
	}
	sender, receiver := cl[0], cl[1]
	if sender.node == receiver.node {
		t.Fatalf("both clients on %s", sender.node)
	}
	hc := HTTPFrom(sender, nil)
	address := map[string]string{}
	for _, m := range framework.Booted.Machines {
		address[m.Name] = m.Address
	}
	counters := func(node string) map[string]uint64 {
		t.Helper()
		url := "http://" + net.JoinHostPort(address[node], strconv.Itoa(wellknown.TrafficMetricsPort)) + "/metrics"
		var got map[string]uint64
		if err := drills.WaitUntil(time.Minute, func() error {
			resp, err := hc.Get(url)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			got = map[string]uint64{}
			sample := regexp.MustCompile(`^` + wellknown.PodNetworkBytesMetric + `\{namespace="([^"]+)",pod="([^"]+)",direction="(\w+)"\} (\d+)$`)
			for s := bufio.NewScanner(resp.Body); s.Scan(); {
				if m := sample.FindStringSubmatch(s.Text()); m != nil {
					got[m[1]+"/"+m[2]+" "+m[3]], _ = strconv.ParseUint(m[4], 10, 64)
				}
			}
			if _, ok := got[ns+"/"+sender.name+" transmit"]; node == sender.node && !ok {
				return fmt.Errorf("%s: no counter of %s yet", node, sender.name)
			}
			if _, ok := got[ns+"/"+receiver.name+" receive"]; node == receiver.node && !ok {
				return fmt.Errorf("%s: no counter of %s yet", node, receiver.name)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	beforeSent, beforeReceived := counters(sender.node), counters(receiver.node)

	const payload = 8 << 20
	l, err := netns.ListenerIn(receiver.netns, "tcp", net.JoinHostPort(receiver.ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	received := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sender.dial(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, payload)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := <-received; n != payload {
		t.Fatalf("the receiver got %d of %d bytes", n, payload)
	}

	within := func(what string, before, after map[string]uint64, key string) {
		t.Helper()
		d := after[key] - before[key]
		if d < payload || d > payload+payload/10+64<<10 {
			t.Errorf("%s: %s counted %d bytes for a %d-byte payload", what, key, d, payload)
		}
		t.Logf("%s: %s counted %d bytes for a %d-byte payload", what, key, d, payload)
	}
	afterSent, afterReceived := counters(sender.node), counters(receiver.node)
	within(sender.node, beforeSent, afterSent, ns+"/"+sender.name+" transmit")
	within(receiver.node, beforeReceived, afterReceived, ns+"/"+receiver.name+" receive")
	for node, counts := range map[string][2]map[string]uint64{sender.node: {beforeSent, afterSent}, receiver.node: {beforeReceived, afterReceived}} {
		for key, after := range counts[1] {
			if !strings.HasPrefix(key, ns+"/") && after-counts[0][key] > payload/10 {
				t.Errorf("%s: %s was charged %d bytes during the transfer", node, key, after-counts[0][key])
			}
		}
	}

	prom := prometheusURL(t)
	query := fmt.Sprintf(`sum(%s{namespace=%q,direction="transmit"})`, wellknown.PodNetworkBytesMetric, ns)
	want := float64(afterSent[ns+"/"+sender.name+" transmit"])
	if err := drills.WaitUntil(2*time.Minute, func() error {
		got, err := promQuery(hc, prom, query)
		if err == nil && got < want {
			err = fmt.Errorf("%s = %v, the sender's agent counted %v", query, got, want)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
}
