package machine

import (
	"errors"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Preflight renders every role with a throwaway PKI of the same key types and sizes as the real
// one, so errors that depend on rendered output (Azure's customData limit) surface before any
// resource is registered.
func Preflight(c *spec.Cluster) error {
	b, err := pki.Issue(pki.Authorities(c), pki.Profiles(c))
	if err != nil {
		return err
	}
	machines, err := RenderAll(c, b)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range machines {
		if _, err := UserData(m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
