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

// An hour's verified snapshot is its keeper, not a newer unverified one of the same hour, and the
// two newest verified snapshots stay whatever the tiers say.
func TestRetentionKeepsVerifiedSnapshots(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	snaps := every(now.Add(-3*time.Hour), 10*time.Minute, 18) // 0900 to 1150
	verified := map[string]bool{"0920": true, "1010": true, "1020": true}
	for i := range snaps {
		if verified[label(snaps[i].Taken)] {
			snaps[i].Verified = snaps[i].Taken.Add(time.Minute)
		}
	}
	expired := Retention{Recent: 2, Hourly: 3}.Expired(snaps, now)
	var kept []string
	for _, s := range snaps {
		if !slices.ContainsFunc(expired, func(e Snapshot) bool { return e.Name == s.Name }) {
			kept = append(kept, label(s.Taken))
		}
	}
	// 1140 and 1150 the newest; 1150 for the 11:00 hour (none verified); 1020, not 1050, for
	// 10:00 and 0920, not 0950, for 09:00; 1010 and 1020 the newest verified.
	if want := []string{"0920", "1010", "1020", "1140", "1150"}; !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
}

// Deltas are kept from the second-newest verified snapshot on: the fallback's whole chain.
func TestRetentionKeepsTheFallbacksDeltaChain(t *testing.T) {
	snaps := []Snapshot{
		{Name: "a", SHA256: "x", Revision: 100, Verified: time.Unix(1, 0)},
		{Name: "b", SHA256: "x", Revision: 200, Verified: time.Unix(2, 0)},
		{Name: "c", SHA256: "x", Revision: 300},
		{Name: "d", SHA256: "x", Revision: 400, Verified: time.Unix(4, 0)},
	}
	deltas := []Delta{{Name: "0", From: 1, To: 90, SHA256: "x"}, {Name: "1", From: 91, To: 150, SHA256: "x"}, {Name: "2", From: 151, To: 200, SHA256: "x"},
		{Name: "3", From: 201, To: 250, SHA256: "x"}, {Name: "4", From: 251, To: 450, SHA256: "x"}}
	var expired []string
	for _, d := range ExpiredDeltas(snaps, deltas) {
		expired = append(expired, d.Name)
	}
	if want := []string{"0", "1", "2"}; !slices.Equal(expired, want) {
		t.Errorf("expired deltas %v, want %v (at or before b, the second-newest verified)", expired, want)
	}
	if got := ExpiredDeltas(snaps[:2], deltas); len(got) != 1 || got[0].Name != "0" {
		t.Errorf("with a and b verified, expired %v; want delta 0, at or before a", got)
	}
	if got := ExpiredDeltas(snaps[1:3], deltas); got != nil {
		t.Errorf("with one verified snapshot, expired %v; want none", got)
	}
}
