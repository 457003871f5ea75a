package arm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/azurerbac"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/arm"
)

// autoscalerFixture is what the real cluster-autoscaler exchanged with the booted cluster's
// stand-in (docs/testing.md says how to record it again): the inventory it found, and its
// requests and the answers, from sign-in to a scale-up's operations and the lists after them.
const autoscalerFixture = "testdata/cluster-autoscaler"

// The stand-in answers the real autoscaler's recorded requests as it did: the same statuses, the
// headers it acts on and every field it was given, on the stand-in's clock of the recording, with
// the autoscaler's role as the program assigns it today: a role that loses an action it calls
// fails here, and so does one that holds an action it did not call, but for a scale-down's.
func TestReplaysTheRealAutoscaler(t *testing.T) {
	exchanges, err := standin.Lines[standin.Exchange](filepath.Join(autoscalerFixture, "wire.jsonl"))
	if err != nil || len(exchanges) == 0 {
		t.Fatalf("the fixture: %d exchanges, %v", len(exchanges), err)
	}
	data, err := os.ReadFile(filepath.Join(autoscalerFixture, "inventory.json"))
	if err != nil {
		t.Fatal(err)
	}
	var inv arm.Inventory
	if err := json.Unmarshal(data, &inv); err != nil {
		t.Fatal(err)
	}
	c, err := spec.LoadStack(filepath.Join("..", "..", "..", spec.StackDir, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clock := &replayClock{now: exchanges[0].Time}
	// As the boot runs it (nspawn.startARM): ten times faster than real time, the machines behind
	// the instances out of reach (the booting process had exited, so creates failed).
	s := &arm.Server{Subscription: machines.RehearsalSubscriptionID, ResourceGroup: c.ResourceGroup(), Location: c.Location, Speedup: 10,
		Now: clock.Now, After: clock.After, Machines: unreachable{}}
	for _, set := range inv.ScaleSets {
		s.AddScaleSet(set)
	}
	for _, vm := range inv.VMs {
		s.AddVM(vm)
	}
	l := arm.Serve(t, s, machines.RehearsalTenantID)
	l.Entra.Now = clock.Now
	s.Auth.Assignments = machines.RehearsalAssignments(c)
	client := machines.RehearsalClientIDs()[addons.AutoscalerName]
	resource := strings.TrimSuffix(azurecloud.Public.ResourceManagerEndpoint, "/") + "/" // as the autoscaler asks
	standin.Replay(t, exchanges, func(ex standin.Exchange, uri string) (*http.Response, error) {
		clock.Advance(ex.Time.Add(handlerDelay))
		token, err := l.Entra.AccessToken(client, resource)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequest(ex.Method, l.HTTP.URL+uri, bytes.NewReader(ex.Body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("User-Agent", ex.UserAgent)
		if ex.IfMatch != "" {
			req.Header.Set("If-Match", ex.IfMatch)
		}
		if len(ex.Body) > 0 {
			req.Header.Set("Content-Type", "application/json")
		}
		return l.HTTP.Client().Do(req)
	})

	// And its role holds no more than it calls: every action its grants hold that the recording
	// does not call is one it calls on a scale-down, which the recording has none of.
	const scaleDown = "Microsoft.Compute/virtualMachineScaleSets/delete/action" // deleting instances
	called := map[string]bool{}
	for _, call := range s.Calls() {
		called[call.Action] = true
	}
	var unused []string
	for _, g := range azurerbac.Grants(addons.AutoscalerName) {
		for _, action := range azurerbac.CustomRoleActions[g.Role] {
			if !called[action] && !slices.Contains(unused, action) {
				unused = append(unused, action)
			}
		}
	}
	if !slices.Equal(unused, []string{scaleDown}) {
		t.Errorf("the autoscaler's role holds actions the real autoscaler did not call: %v; want only %s, a scale-down's", unused, scaleDown)
	}
}

// handlerDelay is how long after the recorder stamped a request the stand-in handled it: the
// replay's clock reads the recorded time plus this.
const handlerDelay = 2 * time.Millisecond

// replayClock is the stand-in's clock during a replay: it moves only when the replay advances it,
// running what fell due on the way (operations ending) at their time, in order.
type replayClock struct {
	mu   sync.Mutex
	now  time.Time
	due  []time.Time
	runs []func()
}

func (c *replayClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *replayClock) After(d time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.due, c.runs = append(c.due, c.now.Add(d)), append(c.runs, f)
}

// Advance moves the clock to t, running each function due by then at its time.
func (c *replayClock) Advance(t time.Time) {
	for {
		c.mu.Lock()
		next := -1
		for i, at := range c.due {
			if !at.After(t) && (next < 0 || at.Before(c.due[next])) {
				next = i
			}
		}
		if next < 0 {
			c.now = t
			c.mu.Unlock()
			return
		}
		f := c.runs[next]
		c.now = c.due[next]
		c.due, c.runs = slices.Delete(c.due, next, next+1), slices.Delete(c.runs, next, next+1)
		c.mu.Unlock()
		f()
	}
}

// unreachable are machines the stand-in cannot reach, as when the booting process has exited.
type unreachable struct{}

var errUnreachable = errors.New("the booting process is gone")

func (unreachable) Create(context.Context, arm.Instance) (string, error) {
	return "", errUnreachable
}
func (unreachable) Delete(context.Context, arm.Instance) error  { return errUnreachable }
func (unreachable) Reimage(context.Context, arm.Instance) error { return errUnreachable }
func (unreachable) RunCommand(context.Context, string, []string) (string, string, error) {
	return "", "", errUnreachable
}
