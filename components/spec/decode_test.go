package spec

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Decode errors name the field path and the line of the stack file the value is on.
func TestDecodeErrorsNameFieldAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, replace, with string
		field               string
		line                int // in the stack file: validSpec's lines are shifted by the two header lines
		inText              string
	}{
		{"quoted number", "  nodes: 2", `  nodes: "10"`, "pools[0].nodes", 11, "not a number"},
		{"float into int", "  nodes: 2", "  nodes: 3.5", "pools[0].nodes", 11, "whole number"},
		{"int overflow", "  nodes: 2", "  nodes: 99999999999999999999", "pools[0].nodes", 11, "out of range"},
		{"quota with a unit", "name: cf-test", "name: cf-test\netcdMain:\n  quotaBackendBytes: 8GiB", "etcdMain.quotaBackendBytes", 5, "8589934592"},
		{"unknown key in a pool", "  nodes: 2", "  nodez: 2", "pools[0].nodez", 11, "unknown key"},
		{"unknown key in autoscaler", "name: cf-test", "name: cf-test\nautoscaler:\n  maxUnready: 5", "autoscaler.maxUnready", 5, "unknown key"},
		{"unknown key in etcdEvents", "name: cf-test", "name: cf-test\netcdEvents:\n  member: 3", "etcdEvents.member", 5, "unknown key"},
		{"unknown top-level key", "name: cf-test", "name: cf-test\netcdMian:\n  members: 5", "etcdMian", 4, "unknown key"},
		{"number for text", "name: cf-test", "name: 1234", "name", 3, "quote it"},
		{"boolean for text", "  vmSize: Standard_D4ds_v5", "  vmSize: yes\n  labels: {a: true}", "pools[0].labels[a]", 11, "not text"},
		{"text for boolean", "  nodes: 2", "  nodes: 2\n  gpu: \"yes\"", "pools[0].gpu", 12, "true or false"},
		{"list for a mapping", "name: cf-test", "name: cf-test\ndns: [1]", "dns", 4, "not a mapping"},
		{"duplicate key", "  nodes: 2", "  nodes: 2\n  nodes: 3", "pools[0].nodes", 12, "twice"},
		{"merge key", "pools:\n- name: cpu", "base: &b {name: cpu}\npools:\n- <<: *b", "pools[0]", 10, "merge keys"},
		{"tagged value", "name: cf-test", "name: !!binary Y2YtdGVzdA==", "name", 3, "tagged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseStackFile(stackFile(strings.Replace(validSpec, tc.replace, tc.with, 1)))
			if err == nil {
				t.Fatal("accepted")
			}
			var fe *FieldError
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				if errors.As(e, &fe) && fe.Field == tc.field {
					break
				}
				fe = nil
			}
			if fe == nil {
				t.Fatalf("no error names %s: %v", tc.field, err)
			}
			if tc.line > 0 && fe.Line != tc.line {
				t.Errorf("line %d, want %d: %v", fe.Line, tc.line, fe)
			}
			if !strings.Contains(fe.Error(), tc.inText) {
				t.Errorf("%q lacks %q", fe, tc.inText)
			}
		})
	}
}

// Validation errors point into the stack file too.
func TestValidationErrorsCarryTheLine(t *testing.T) {
	_, err := ParseStackFile(stackFile(strings.Replace(validSpec, "  maxNodes: 10", "  maxNodes: 1", 1)))
	if err == nil || !strings.HasPrefix(err.Error(), "line 12: "+ConfigKey+".pools[0].maxNodes") {
		t.Errorf("got %v, want the error on line 12", err)
	}
	_, err = ParseStackFile(stackFile(validSpec + "  labels:\n    team: \"a b\"\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "line 19: ") {
		t.Errorf("got %v, want the label's line 19", err)
	}
}

// Pulumi hands the program JSON; its line numbers mean nothing to the user, so none are shown.
func TestConfigJSONErrorsHaveNoLines(t *testing.T) {
	js, err := ConfigJSON(stackFile(strings.Replace(validSpec, "  nodes: 2", "  nodes: 2.5", 1)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(js)
	if err == nil || strings.Contains(err.Error(), "line") || !slices.Contains(Fields(err), "pools[0].nodes") {
		t.Errorf("got %v, want pools[0].nodes without a line", err)
	}
	js, err = ConfigJSON(stackFile(validSpec))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseConfig(js); err != nil {
		t.Errorf("the stack's JSON form: %v", err)
	}
}

// An explicit 0 is the stack's choice, not a request for the default.
func TestExplicitZeroIsKept(t *testing.T) {
	c, err := ParseStackFile(stackFile(validSpec + "autoscaler:\n  okUnreadyCount: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Autoscaler.OkUnreadyCount != 0 {
		t.Errorf("okUnreadyCount %d, want the explicit 0", c.Autoscaler.OkUnreadyCount)
	}
	if c := parseValid(t); c.Autoscaler.OkUnreadyCount != DefaultOkUnreadyCount {
		t.Errorf("okUnreadyCount %d when unset, want the default", c.Autoscaler.OkUnreadyCount)
	}
	_, err = ParseStackFile(stackFile(validSpec + "dns:\n  replicas: 0\n"))
	if !slices.Contains(Fields(err), "dns.replicas") {
		t.Errorf("dns.replicas: 0 gave %v, want it refused rather than defaulted", err)
	}
	// "key:" with nothing after it is absent, not zero.
	if _, err := ParseStackFile(stackFile(validSpec + "dns:\n  replicas:\n")); err != nil {
		t.Errorf("an empty value: %v", err)
	}
}

// Team priority classes load from a stack file, and read back from what was applied.
func TestTeamPriorityClassesLoad(t *testing.T) {
	c, err := ParseStackFile(stackFile(validSpec + "teams:\n  priorityClasses:\n    - {name: urgent, value: 5000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []TeamPriorityClass{{Name: "urgent", Value: 5000}}; !slices.Equal(c.Teams.PriorityClasses, want) {
		t.Errorf("priority classes %+v, want %+v", c.Teams.PriorityClasses, want)
	}
	back, err := c.Clone()
	if err != nil || !slices.Equal(back.Teams.PriorityClasses, c.Teams.PriorityClasses) {
		t.Errorf("read back from the applied record: %+v %v", back, err)
	}
}

func TestStackFileShape(t *testing.T) {
	for name, data := range map[string]string{
		"two documents": string(stackFile(validSpec)) + "---\nconfig: {}\n",
		"no config":     "encryptionsalt: x\n",
		"empty":         "",
		"spec twice":    string(stackFile(validSpec)) + "  clusterforge:cluster: {}\n",
	} {
		if _, err := ParseStackFile([]byte(data)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Aliases that multiply the document (a "billion laughs") are refused before they cost memory.
func TestAliasBombIsRefused(t *testing.T) {
	pool := "p: &p {name: cpu, vmSize: Standard_D4ds_v5, labels: {a0: b, a1: b, a2: b, a3: b, a4: b, a5: b, a6: b, a7: b, a8: b, a9: b}}\n"
	data := "bombs:\n  " + pool + string(stackFile(strings.Replace(validSpec, "pools:\n", "pools: ["+strings.Repeat("*p, ", 3000)+"*p]\nx:\n", 1)))
	_, err := ParseStackFile([]byte(data))
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("got %.300v, want the bomb refused", err)
	}
}
