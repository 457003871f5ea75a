// Package boot holds the end-to-end scenarios of a machine booting from its baked image: every
// unit of its user-data up, the cluster the machines form, the worker's local disk, preloaded
// images and sysctls, a missing disk and a clean reboot. Package booted runs them.
package boot
