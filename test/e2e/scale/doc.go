// Package scale holds the scale benchmark's smoke run (test/scale) on a rehearsal of its own: a
// few hundred KWOK nodes, so the benchmark's parts are proven end to end in every `make e2e`.
package scale
