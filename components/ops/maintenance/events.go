// Package maintenance reads Azure Scheduled Events (the instance metadata service's
// /metadata/scheduledevents) and says what they mean for this machine's node (L37): a planned
// reboot, redeploy, eviction or deletion becomes the node condition MaintenanceScheduled, which
// the remediation controller drains ahead of. Events for a placement group reach every VM in it,
// so only events naming this VM count.
package maintenance

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition is the node condition the watcher keeps.
const Condition corev1.NodeConditionType = wellknown.MaintenanceScheduledCondition

// Path is the metadata service's Scheduled Events endpoint, with the API version read here.
const Path = "/metadata/scheduledevents?api-version=2020-07-01"

// Document is the endpoint's answer.
type Document struct {
	DocumentIncarnation int
	Events              []Event
}

// Event is one scheduled event.
type Event struct {
	EventID      string `json:"EventId"`
	EventType    string // Freeze, Reboot, Redeploy, Preempt, Terminate
	ResourceType string
	Resources    []string // the VMs' names (a scale set's: <set>_<instance id>)
	EventStatus  string   // Scheduled, then Started
	// NotBefore is when the event may start at the earliest, in RFC 1123 GMT ("Mon, 19 Sep 2016
	// 18:29:47 GMT"); empty once Started.
	NotBefore         string
	Description       string
	EventSource       string // Platform or User
	DurationInSeconds int
}

// StartRequests is the body of a POST to Path that starts events before their NotBefore.
type StartRequests struct {
	StartRequests []StartRequest
}

// StartRequest names one event to start.
type StartRequest struct {
	EventID string `json:"EventId"`
}

// Parse reads a document, refusing one whose NotBefore does not parse: a watcher that misread
// the time would drain too late.
func Parse(r io.Reader) (Document, error) {
	var doc Document
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&doc); err != nil {
		return Document{}, fmt.Errorf("scheduled events: %w", err)
	}
	for _, e := range doc.Events {
		if e.NotBefore == "" {
			continue
		}
		if _, err := time.Parse(time.RFC1123, e.NotBefore); err != nil {
			return Document{}, fmt.Errorf("scheduled events: event %s NotBefore %q: %w", e.EventID, e.NotBefore, err)
		}
	}
	return doc, nil
}

// Disruptive says whether the event takes the VM away long enough to drain ahead of it. A Freeze
// pauses the VM for seconds, so it is reported but not drained for.
func Disruptive(eventType string) bool {
	return slices.Contains([]string{"Reboot", "Redeploy", "Preempt", "Terminate"}, eventType)
}

// ConditionFor is the node's MaintenanceScheduled condition for the VM named vm: True with the
// soonest disruptive event naming it (reason its type, message its time and id), else False.
func ConditionFor(doc Document, vm string, now time.Time) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: Condition, Status: corev1.ConditionFalse, Reason: "NoMaintenanceScheduled",
		Message: "no scheduled event names this VM", LastHeartbeatTime: metav1.NewTime(now)}
	var soonest *Event
	var soonestAt time.Time
	for i, e := range doc.Events {
		if !Disruptive(e.EventType) || !slices.ContainsFunc(e.Resources, isVM(vm)) {
			continue
		}
		at := now // Started, or no time given: now
		if t, err := time.Parse(time.RFC1123, e.NotBefore); err == nil {
			at = t
		}
		if soonest == nil || at.Before(soonestAt) {
			soonest, soonestAt = &doc.Events[i], at
		}
	}
	if soonest != nil {
		c.Status, c.Reason = corev1.ConditionTrue, soonest.EventType
		when := "" // a started event has no time: the message stays the same from poll to poll
		if soonest.NotBefore != "" {
			when = " not before " + soonestAt.UTC().Format(time.RFC3339)
		}
		c.Message = fmt.Sprintf("%s %s%s (event %s, from %s)", soonest.EventType, strings.ToLower(soonest.EventStatus),
			when, soonest.EventID, soonest.EventSource)
	}
	return c
}

// Startable are the events this VM may start early once its node is drained: disruptive, still
// Scheduled, and naming this VM alone. Starting an event starts it for every VM it names (Azure's
// documentation), and the others' nodes may still run pods.
func Startable(doc Document, vm string) []string {
	var ids []string
	for _, e := range doc.Events {
		if Disruptive(e.EventType) && e.EventStatus == "Scheduled" && len(e.Resources) == 1 && isVM(vm)(e.Resources[0]) {
			ids = append(ids, e.EventID)
		}
	}
	return ids
}

// isVM matches a resource name to the VM's: Azure spells names without regard to case.
func isVM(vm string) func(string) bool {
	return func(r string) bool { return strings.EqualFold(r, vm) }
}
