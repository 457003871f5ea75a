package maintenance

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// documented is shaped as Azure's documentation shows a document: a placement group's events
// reach every VM in it, each naming the VMs it affects.
const documented = `{
  "DocumentIncarnation": 2,
  "Events": [
    {"EventId": "4CAEA225-A741-474D-A72E-428C86FCD853", "EventStatus": "Scheduled", "EventType": "Reboot",
     "ResourceType": "VirtualMachine", "Resources": ["cf-dev-cpu_3", "cf-dev-cpu_4"],
     "NotBefore": "Wed, 25 Nov 2026 12:15:00 GMT", "Description": "", "EventSource": "Platform", "DurationInSeconds": -1},
    {"EventId": "B2A4C9E0-0000-4000-8000-000000000001", "EventStatus": "Scheduled", "EventType": "Freeze",
     "ResourceType": "VirtualMachine", "Resources": ["cf-dev-cpu_5"],
     "NotBefore": "Wed, 25 Nov 2026 12:05:00 GMT", "Description": "", "EventSource": "Platform", "DurationInSeconds": 9},
    {"EventId": "C0FFEE00-0000-4000-8000-000000000002", "EventStatus": "Scheduled", "EventType": "Redeploy",
     "ResourceType": "VirtualMachine", "Resources": ["cf-dev-cpu_4"],
     "NotBefore": "Wed, 25 Nov 2026 12:10:00 GMT", "Description": "", "EventSource": "User", "DurationInSeconds": -1}
  ]
}`

func TestConditionForNamesTheSoonestDisruptiveEventOfThisVM(t *testing.T) {
	doc, err := Parse(strings.NewReader(documented))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		vm, status, reason, message string
	}{
		{"cf-dev-cpu_3", "True", "Reboot", "Reboot scheduled not before 2026-11-25T12:15:00Z (event 4CAEA225-A741-474D-A72E-428C86FCD853, from Platform)"},
		{"cf-dev-cpu_4", "True", "Redeploy", "Redeploy scheduled not before 2026-11-25T12:10:00Z (event C0FFEE00-0000-4000-8000-000000000002, from User)"},
		{"cf-dev-cpu_5", "False", "NoMaintenanceScheduled", "no scheduled event names this VM"}, // a freeze only
		{"cf-dev-cpu_6", "False", "NoMaintenanceScheduled", "no scheduled event names this VM"},
	} {
		c := ConditionFor(doc, tc.vm, now)
		if c.Type != Condition || string(c.Status) != tc.status || c.Reason != tc.reason || c.Message != tc.message {
			t.Errorf("%s: %s=%s %s %q, want %s %s %q", tc.vm, c.Type, c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.message)
		}
	}
}

func TestAStartedEventHasNoTimeAndCountsNow(t *testing.T) {
	doc, err := Parse(strings.NewReader(`{"DocumentIncarnation": 3, "Events": [{"EventId": "E1", "EventStatus": "Started",
	  "EventType": "Preempt", "Resources": ["cf-dev-gpu_0"], "NotBefore": "", "EventSource": "Platform"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := ConditionFor(doc, "cf-dev-gpu_0", now)
	if c.Status != corev1.ConditionTrue || c.Message != "Preempt started (event E1, from Platform)" {
		t.Errorf("%+v", c)
	}
	if later := ConditionFor(doc, "cf-dev-gpu_0", now.Add(time.Minute)); later.Message != c.Message {
		t.Errorf("the message changed with the clock: %q, then %q", c.Message, later.Message)
	}
}

func TestParseRefusesATimeItCannotRead(t *testing.T) {
	for _, doc := range []string{
		`{"Events": [{"EventId": "E1", "EventType": "Reboot", "NotBefore": "2026-11-25T12:00:00Z"}]}`,
		`{"Events": [`,
	} {
		if _, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("%s parsed", doc)
		}
	}
}

func TestStartableEventsNameThisVMAlone(t *testing.T) {
	doc, err := Parse(strings.NewReader(documented))
	if err != nil {
		t.Fatal(err)
	}
	doc.Events = append(doc.Events, Event{EventID: "D1", EventType: "Reboot", EventStatus: "Started", Resources: []string{"cf-dev-cpu_6"}})
	for vm, want := range map[string][]string{
		"cf-dev-cpu_3": nil, // its reboot names cf-dev-cpu_4 too: starting it would reboot that VM undrained
		"CF-DEV-CPU_4": {"C0FFEE00-0000-4000-8000-000000000002"},
		"cf-dev-cpu_5": nil, // a freeze is not drained for
		"cf-dev-cpu_6": nil, // already started
	} {
		if got := Startable(doc, vm); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", vm, got, want)
		}
	}
}
