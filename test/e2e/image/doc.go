// Package image holds the end-to-end scenarios of the baked worker image on its own: its disk unit, containerd, preloaded images and sysctls, and the image pull benchmark.
package image
