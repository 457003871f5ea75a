package main

import (
	"context"
	"strings"
	"testing"
)

// A share remediation cannot use stops the controller at start, naming the flag, before it
// serves anything: a stack value out of range is never half applied.
func TestControllerRefusesABadUnhealthyShare(t *testing.T) {
	for _, bad := range []string{"0", "1.5", "-0.2"} {
		err := controller(context.Background(), []string{"--remediation-max-unhealthy=" + bad})
		if err == nil || !strings.Contains(err.Error(), "--remediation-max-unhealthy") {
			t.Errorf("--remediation-max-unhealthy=%s: %v, want an error naming the flag", bad, err)
		}
	}
}
