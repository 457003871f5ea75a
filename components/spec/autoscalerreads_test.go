package spec

import (
	"path/filepath"
	"testing"
)

// At prod-10k's full size (83 scale sets, 8,000 GPU nodes in scale sets of 100) the autoscaler's
// steady High Cost Get VMSS reads stay at its quarter of the subscription's 360 a minute with the
// provider's default TTL; a fleet whose VM lists would not gets a longer TTL that brings it back.
func TestAutoscalerReadsStayInItsShareAtFullSize(t *testing.T) {
	c, err := LoadStack(filepath.Join("..", "..", StackDir, "Pulumi.prod-10k.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Worked by hand: a list of scale sets a minute, and 101 pages of VM lists every 225 s on
	// average (a TTL of 300 s, each list splayed by up to 150 s).
	sets, pages := c.autoscalerPages()
	if sets != 83 || pages != 101 || c.AutoscalerInstancesTTLSeconds() != 300 {
		t.Fatalf("prod-10k: %d scale sets, %d pages, TTL %d s; want 83, 101, 300", sets, pages, c.AutoscalerInstancesTTLSeconds())
	}
	if j := c.AutoscalerInstancesJitterSeconds(); j != 150 {
		t.Errorf("prod-10k: splay up to %d s, want 150", j)
	}
	if use := c.AutoscalerReadUse(); use.Use != 28 || use.Limit.Value != 360 {
		t.Errorf("prod-10k reads %d of %d a minute, want 28 (1 + 101/3.75) of 360", use.Use, use.Limit.Value)
	}
	for i := range c.Pools {
		c.Pools[i].MaxNodes *= 10 // past any real fleet: ~1,000 pages
	}
	_, pages = c.autoscalerPages()
	ttl := c.AutoscalerInstancesTTLSeconds()
	if use := c.AutoscalerReadUse(); ttl <= 300 || use.Use > 90 {
		t.Errorf("%d pages: TTL %d s, %d reads a minute; want a TTL past 300 s holding them to 90 (a quarter of 360)", pages, ttl, use.Use)
	}
	// Two clients read High Cost Get VMSS, each limited on its own: an eighth each.
	if qps, bucket := AutoscalerReadRate(); qps != 0.75 || bucket != 135 {
		t.Errorf("read rate %.2f/s, burst %d; want an eighth of 360 a minute (0.75/s) and of 1,080", qps, bucket)
	}
	// Delete VMSS is the smaller of the scale sets' client's write buckets: 175 a minute, 525.
	if qps, bucket := AutoscalerWriteRate(); qps != 175.0/4/60 || bucket != 131 {
		t.Errorf("write rate %.3f/s, burst %d; want a quarter of Delete VMSS's 175 a minute and of 525", qps, bucket)
	}
}
