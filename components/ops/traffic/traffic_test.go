package traffic

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/tier"
	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// cacheFile is a libcni result cache entry as containerd writes one for a pod's eth0.
func cacheFile(namespace, pod, address string) string {
	return fmt.Sprintf(`{"kind":"cniCacheV1","containerId":"0123abcd","config":"e30=","ifName":"eth0","networkName":"azure",`+
		`"cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAMESPACE",%q],["K8S_POD_NAME",%q],["K8S_POD_INFRA_CONTAINER_ID","0123abcd"],["K8S_POD_UID","u"]],`+
		`"result":{"cniVersion":"0.3.0","interfaces":[{"name":"eth0"}],"ips":[{"version":"4","address":%q,"interface":0}]}}`, namespace, pod, address)
}

func writeCache(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCachedPods(t *testing.T) {
	dir := t.TempDir()
	writeCache(t, dir, map[string]string{
		"azure-a-eth0":         cacheFile("team-a", "trainer-0", "10.240.0.17/16"),
		"cni-loopback-a-lo":    cacheFile("team-a", "trainer-0", "127.0.0.1/8"),
		"azure-b-eth0":         cacheFile("team-b", "server-1", "10.240.0.18/16"),
		"azure-stale-eth0":     cacheFile("gone", "old", "10.240.0.18/16"),
		"azure-garbage-eth0":   "{not json",
		"azure-nonpod-eth0":    `{"kind":"cniCacheV1","result":{"ips":[{"address":"10.240.0.30/16"}]}}`,
		"azure-otherkind-eth0": strings.Replace(cacheFile("x", "y", "10.240.0.31/16"), "cniCacheV1", "cniCacheV2", 1),
	})
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "azure-stale-eth0"), old, old); err != nil {
		t.Fatal(err)
	}
	pods, err := CachedPods(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range pods {
		got[p.IP.String()] = p.Namespace + "/" + p.Name
	}
	want := map[string]string{"10.240.0.17": "team-a/trainer-0", "10.240.0.18": "team-b/server-1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pods %v, want %v", got, want)
	}
	if pods, err := CachedPods(filepath.Join(dir, "missing")); err != nil || len(pods) != 0 {
		t.Errorf("a node with no cache yet: %v, %v", pods, err)
	}
}

// inNewNetns runs f on a thread of its own in a new network namespace (root only), with lo up;
// the thread is discarded afterwards.
func inNewNetns(t *testing.T, f func(netnsFd int)) {
	t.Helper()
	tier.Root(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		f(fd)
	}()
	<-done
}

// ip runs ip(8) from the calling thread, so in its network namespace.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The real kernel counts: a client sends 4 MiB to a "pod" address and reads 1 MiB back; the pod's
// receive counter holds at least the 4 MiB and not much more, its transmit counter at least the
// 1 MiB, and another pod's counters stay at zero. A later sync keeps the counts and drops a pod
// that left. The exporter names each pod from the CNI cache.
func TestAsRootCountersCountThePodsBytes(t *testing.T) {
	inNewNetns(t, func(netnsFd int) {
		ip(t, "link", "set", "lo", "up")
		ip(t, "addr", "add", "10.9.9.9/32", "dev", "lo")
		conn, err := nftables.New(nftables.WithNetNSFd(netnsFd))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		writeCache(t, dir, map[string]string{
			"azure-a-eth0": cacheFile("team-a", "server", "10.9.9.9/16"),
			"azure-b-eth0": cacheFile("team-b", "idle", "10.9.9.10/16"),
		})
		a := &Accountant{Counters: &Counters{Conn: conn}, CNIResults: dir}
		if err := a.Refresh(); err != nil {
			t.Fatal(err)
		}

		const sent, answered = 4 << 20, 1 << 20
		l, err := net.Listen("tcp", "10.9.9.9:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			if _, err := io.CopyN(io.Discard, c, sent); err == nil {
				_, _ = c.Write(make([]byte, answered))
			}
		}()
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}).Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(make([]byte, sent)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(io.Discard, c, answered); err != nil {
			t.Fatal(err)
		}
		c.Close()

		check := func(when string, wantIdle bool) map[string]uint64 {
			t.Helper()
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, nil)
			got := map[string]uint64{}
			sample := regexp.MustCompile(`^` + wellknown.PodNetworkBytesMetric + `\{namespace="([^"]+)",pod="([^"]+)",direction="(\w+)"\} (\d+)$`)
			for s := bufio.NewScanner(rec.Body); s.Scan(); {
				if m := sample.FindStringSubmatch(s.Text()); m != nil {
					v, _ := strconv.ParseUint(m[4], 10, 64)
					got[m[1]+"/"+m[2]+" "+m[3]] = v
				} else if !strings.HasPrefix(s.Text(), "# ") {
					t.Errorf("%s: unexpected line %q", when, s.Text())
				}
			}
			if rx := got["team-a/server receive"]; rx < sent || rx > sent+sent/10+64<<10 {
				t.Errorf("%s: the server received %d bytes by its counter, %d sent", when, rx, sent)
			}
			if tx := got["team-a/server transmit"]; tx < answered {
				t.Errorf("%s: the server sent %d bytes by its counter, %d answered", when, tx, answered)
			}
			_, idle := got["team-b/idle receive"]
			if idle != wantIdle || got["team-b/idle receive"] != 0 || got["team-b/idle transmit"] != 0 {
				t.Errorf("%s: the idle pod's counters %v (listed %v, want %v)", when, got, idle, wantIdle)
			}
			return got
		}
		before := check("after the transfer", true)

		if err := os.Remove(filepath.Join(dir, "azure-b-eth0")); err != nil {
			t.Fatal(err)
		}
		if err := a.Refresh(); err != nil {
			t.Fatal(err)
		}
		after := check("after the idle pod left", false)
		if after["team-a/server receive"] < before["team-a/server receive"] {
			t.Errorf("a sync reset the server's counter: %d then %d", before["team-a/server receive"], after["team-a/server receive"])
		}
		counters, err := a.Counters.Read()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := counters[counterName(Receive, netip.MustParseAddr("10.9.9.10"))]; ok || len(counters) != 2 {
			t.Errorf("counters after the idle pod left: %v", counters)
		}
	})
}
