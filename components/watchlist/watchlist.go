// Package watchlist switches client-go's WatchListClient for this process's informers: each
// reflector then fills its cache from one watch that streams the initial state out of the
// apiserver's watch cache, instead of a LIST the apiserver assembles in memory. client-go turns it
// on by default from 1.35; this package says so for our own processes whatever their client-go,
// and lets a test turn it off.
package watchlist

import (
	"sync/atomic"

	clientfeatures "k8s.io/client-go/features"
)

// Gates are client-go's feature gates with WatchListClient decided here. A reflector reads the
// gate when it is made, so a change applies to informers started after it.
type Gates struct {
	base clientfeatures.Gates
	on   atomic.Bool
}

// Enabled is base's answer for every feature but WatchListClient.
func (g *Gates) Enabled(f clientfeatures.Feature) bool {
	if f == clientfeatures.WatchListClient {
		return g.on.Load()
	}
	return g.base.Enabled(f)
}

// Set turns WatchListClient on or off for the informers started from now on.
func (g *Gates) Set(on bool) { g.on.Store(on) }

// Install makes g client-go's feature gates, WatchListClient on. Call it before any client is
// made (client-go warns otherwise).
func Install() *Gates {
	g := &Gates{base: clientfeatures.FeatureGates()}
	g.on.Store(true)
	clientfeatures.ReplaceFeatureGates(g)
	return g
}
