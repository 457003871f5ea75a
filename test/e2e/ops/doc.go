// Package ops holds the end-to-end scenarios of the fleet operations layer: the scale-down brake, team quotas with borrowing, preflight, and maintenance events, on the rehearsal's real apiservers and scheduler.
package ops
