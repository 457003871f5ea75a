// Package tenants holds the end-to-end scenarios of a hostile team: what its edit rights are
// refused, and the runc escape shapes contained. Package booted runs them.
package tenants
