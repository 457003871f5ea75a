// Package ops holds the end-to-end scenarios of the fleet operations layer: the scale-down brake,
// team quotas with borrowing, preflight and maintenance events on the rehearsal's real apiservers
// and scheduler; on booted machines the layer on the workers, node-problem-detector, the node
// agents' rights and the sign-in to Azure. Packages rehearsal and booted run them.
package ops
