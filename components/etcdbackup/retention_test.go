package etcdbackup

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// every returns a good snapshot each step from start for n steps, oldest first.
func every(start time.Time, step time.Duration, n int) []Snapshot {
	var out []Snapshot
	for i := range n {
		t := start.Add(time.Duration(i) * step)
		out = append(out, Snapshot{Name: t.Format(timeLayout) + "-r1.db", Taken: t, SHA256: "x"})
	}
	return out
}

func TestRetentionKeepsTiers(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	policy := Retention{Recent: 3, Hourly: 2, Daily: 2}
	for _, tc := range []struct {
		name  string
		snaps []Snapshot
		keep  []string // the kept snapshots' times, HHMM on day 23 unless dated
	}{
		{"fewer than Recent: all kept", every(now.Add(-10*time.Minute), 5*time.Minute, 2), []string{"1150", "1155"}},
		{"5-minute snapshots over 3 hours: the 3 newest, the newest of the last 2 hours", every(now.Add(-3*time.Hour), 5*time.Minute, 36),
			[]string{"1055", "1145", "1150", "1155"}},
		{"a week of hourly snapshots: newest, this hour, last hour, today, yesterday", every(now.Add(-7*24*time.Hour), time.Hour, 7*24),
			[]string{"0900", "1000", "1100", "22-2300"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expired := policy.Expired(tc.snaps, now)
			var kept []string
			for _, s := range tc.snaps {
				if !slices.ContainsFunc(expired, func(e Snapshot) bool { return e.Name == s.Name }) {
					kept = append(kept, label(s.Taken))
				}
			}
			slices.Sort(kept)
			want := slices.Clone(tc.keep)
			slices.Sort(want)
			if !slices.Equal(kept, want) {
				t.Errorf("kept %v, want %v", kept, want)
			}
		})
	}
}

func label(t time.Time) string {
	if t.Day() == 23 {
		return t.Format("1504")
	}
	return fmt.Sprintf("%d-%s", t.Day(), t.Format("1504"))
}

func TestRetentionNeverCountsBadObjectsAsKeepers(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	snaps := every(now.Add(-time.Hour), 10*time.Minute, 3)
	bad := every(now.Add(-5*time.Minute), time.Minute, 4)
	for i := range bad {
		bad[i].SHA256 = ""
	}
	expired := Retention{Recent: 2}.Expired(append(snaps, bad...), now)
	if len(expired) != 1 || expired[0].Name != snaps[0].Name {
		t.Errorf("expired %v; want only the oldest good snapshot: four fresh objects without checksum must not push good ones out, and are kept a day for inspection", expired)
	}
}
