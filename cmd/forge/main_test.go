package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Each verb takes its own flags only, and a verb that acts on Azure runs only on a named stack.
func TestVerbsTakeTheirOwnFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage string // the usage error, "" for none
	}{
		{nil, "usage: forge <verb>"},
		{[]string{"apply"}, `no verb "apply"`},
		{[]string{"roll"}, "--stack is required"},
		{[]string{"grow", "--pool", "gpu", "--to", "10"}, "--stack is required"},
		{[]string{"diff", "--yes"}, "flag provided but not defined: -yes"},
		{[]string{"plan", "--pool", "gpu"}, "flag provided but not defined: -pool"},
		{[]string{"retire", "--stack", "dev", "--renew-certificates"}, "flag provided but not defined: -renew-certificates"},
		{[]string{"roll", "--stack", "dev", "now"}, `unexpected "now"`},
	} {
		var stderr bytes.Buffer
		err := run(tc.args, &bytes.Buffer{}, &stderr)
		var usage usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.usage) {
			t.Errorf("forge %s: %v, want the usage error %q", strings.Join(tc.args, " "), err, tc.usage)
		}
	}
	var stdout bytes.Buffer
	if err := run([]string{"version"}, &stdout, &bytes.Buffer{}); err != nil || !strings.HasPrefix(stdout.String(), "forge ") {
		t.Errorf("forge version: %q, %v", stdout.String(), err)
	}
}
