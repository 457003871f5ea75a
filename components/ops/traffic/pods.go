// Package traffic counts every local pod's network bytes on its node (L32): the seeds asked which
// namespace moves the bytes, and answered with iptables mangle rules and an exporter. Here the
// node agent keeps two nftables counters per pod IP (transmit and receive) and serves them on
// /metrics with the pod's namespace and name, which it learns from the node itself, never from
// the API (L07).
package traffic

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Pod is a pod on this node and its address.
type Pod struct {
	Namespace, Name string
	IP              netip.Addr
}

// cniCacheEntry is the part of a libcni cache file ("kind": "cniCacheV1") this package reads.
type cniCacheEntry struct {
	Kind    string      `json:"kind"`
	CNIArgs [][2]string `json:"cniArgs"`
	Result  struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	} `json:"result"`
}

// CachedPods are the pods whose network the node's CNI set up, from the cache in dir: each IPv4
// address once, with the newest file's pod where a stale entry reuses it. Loopback results
// (containerd sets up every pod's lo too) and files of other kinds are skipped.
func CachedPods(dir string) ([]Pod, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no pod has started on this node yet
	}
	if err != nil {
		return nil, err
	}
	type seen struct {
		pod   Pod
		mtime time.Time
	}
	byIP := map[netip.Addr]seen{}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue // removed since the listing
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var entry cniCacheEntry
		if err := json.Unmarshal(data, &entry); err != nil || entry.Kind != "cniCacheV1" {
			continue
		}
		var pod Pod
		for _, kv := range entry.CNIArgs {
			switch kv[0] {
			case "K8S_POD_NAMESPACE":
				pod.Namespace = kv[1]
			case "K8S_POD_NAME":
				pod.Name = kv[1]
			}
		}
		if pod.Namespace == "" || pod.Name == "" {
			continue
		}
		for _, ip := range entry.Result.IPs {
			prefix, err := netip.ParsePrefix(ip.Address)
			if err != nil || !prefix.Addr().Is4() || prefix.Addr().IsLoopback() {
				continue
			}
			pod.IP = prefix.Addr()
			if old, ok := byIP[pod.IP]; !ok || info.ModTime().After(old.mtime) {
				byIP[pod.IP] = seen{pod, info.ModTime()}
			}
		}
	}
	pods := make([]Pod, 0, len(byIP))
	for _, s := range byIP {
		pods = append(pods, s.pod)
	}
	return pods, nil
}

// String is "namespace/name (ip)".
func (p Pod) String() string { return fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, p.IP) }

// counterName is the nftables counter of an address and direction: "rx-10.1.2.3".
func counterName(d Direction, ip netip.Addr) string { return string(d) + "-" + ip.String() }

// parseCounterName undoes counterName.
func parseCounterName(name string) (Direction, netip.Addr, bool) {
	d, ip, ok := strings.Cut(name, "-")
	if !ok || (Direction(d) != Transmit && Direction(d) != Receive) {
		return "", netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(ip)
	return Direction(d), addr, err == nil
}
