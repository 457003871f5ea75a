// Package netns opens connections and listeners inside a network namespace, and forwards a
// loopback port of this host into one (`rehearse forward`): how the host reaches booted machines
// that have no route to it.
package netns
