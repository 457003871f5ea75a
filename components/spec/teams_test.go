package spec

import (
	"math"
	"testing"
)

// A kind counted under two names counts once, at the lower limit; names that bound no stored
// objects (pods, which counts running ones, requests.cpu, services.nodeports) add nothing.
func TestFootprintCountsEachKindOnce(t *testing.T) {
	teams := Teams{MaxObjectBytes: 100, MaxDataObjectBytes: 1000, Quota: map[string]string{
		"pods": "1", "count/pods": "5", "count/jobs.batch": "2", "configmaps": "3", "count/configmaps": "1",
		"requests.cpu": "100", "services.nodeports": "0"}}
	if got, want := teams.Footprint(), int64(5*100+2*100+1*1000); got != want {
		t.Errorf("footprint %d, want %d", got, want)
	}
	teams.Quota["count/jobs.batch"] = "1E"
	if got := teams.Footprint(); got != math.MaxInt64 {
		t.Errorf("a quota of 1E Jobs: footprint %d, want it saturated", got)
	}
}
