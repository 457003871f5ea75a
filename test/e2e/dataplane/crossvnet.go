package dataplane

import (
	"context"
	"errors"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"maps"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"
)

// The booted cluster spans two worker VNets (the dev stack's pools cpu and cpu2), each a bridge of
// its own in the hub, joined as peering joins them; the data-plane checks run from a pod in each.
// Cutting the two VNets' peering cuts their pods apart, and peering them again joins them: the
// checks across VNets do not pass by some other route.
func PodsReachAcrossWorkerVNetsThroughTheirPeering(t *testing.T) {
	cl, _ := SharedClients(t)
	vnetOf := func(addr string) string {
		a, err := netip.ParseAddr(addr)
		for _, w := range framework.Booted.Cluster.WorkerVNets() {
			if err == nil && netip.MustParsePrefix(w.Prefix).Contains(a) {
				return w.Name
			}
		}
		return ""
	}
	byVNet := map[string]Client{}
	for _, c := range cl {
		m, err := framework.Booted.Machine(c.node)
		if err != nil {
			t.Fatal(err)
		}
		if vnet := vnetOf(m.Address); vnet == "" || vnetOf(c.ip) != vnet {
			t.Errorf("node %s (%s) and its pod %s (%s) are not in one worker VNet", c.node, m.Address, c.name, c.ip)
		} else {
			byVNet[vnet] = c
		}
	}
	vnets := slices.Sorted(maps.Keys(byVNet))
	if len(vnets) < 2 {
		t.Fatalf("the booted workers' pods are in worker VNets %v: the checks across VNets need two", vnets)
	}
	a, z := byVNet[vnets[0]], byVNet[vnets[1]]
	// A pause pod listens on nothing: its kernel's refusal is the answer that the packet arrived.
	reaches := func(from, to Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := from.dial(ctx, "tcp", net.JoinHostPort(to.ip, "1"))
		if err == nil {
			conn.Close()
		}
		if err == nil || errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return err
	}
	each := func(check func(from, to Client, err error)) {
		check(a, z, reaches(a, z))
		check(z, a, reaches(z, a))
	}
	each(func(from, to Client, err error) {
		if err != nil {
			t.Fatalf("%s (%s) → %s (%s): %v", from.name, from.ip, to.name, to.ip, err)
		}
	})
	peer, err := framework.Booted.Unpeer(vnets[0], vnets[1])
	if err != nil {
		t.Fatal(err)
	}
	peered := false
	t.Cleanup(func() { // every later check needs the VNets peered
		if !peered {
			_ = peer()
		}
	})
	each(func(from, to Client, err error) {
		if err == nil {
			t.Errorf("with the peering of %s and %s cut, %s (%s) still reaches %s (%s)", vnets[0], vnets[1], from.name, from.ip, to.name, to.ip)
		} else {
			t.Logf("peering cut: %s (%s) → %s (%s): %v", from.name, from.ip, to.name, to.ip, err)
		}
	})
	if err := peer(); err != nil {
		t.Fatal(err)
	}
	peered = true
	each(func(from, to Client, err error) {
		if err != nil {
			t.Errorf("peered again, %s (%s) → %s (%s): %v", from.name, from.ip, to.name, to.ip, err)
		}
	})
}
