// Package services holds the end-to-end scenario of the cluster services' Pulumi stack applied
// by the engine built here onto a booted cluster. Package booted runs it.
package services
