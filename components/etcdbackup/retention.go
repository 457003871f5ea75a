package etcdbackup

import "time"

// Retention is how many snapshots are kept in each tier, counted as restic and borg count: a tier
// of N keeps the newest snapshot of each of the N latest hours (days) that have one.
type Retention struct {
	// Recent is how many of the newest snapshots are kept whatever their age. Default 24.
	Recent int
	// Hourly is how many hours, latest first, keep their newest snapshot. Default 48.
	Hourly int
	// Daily is how many UTC days, latest first, keep their newest snapshot. Default 30.
	Daily int
}

// DefaultRetention keeps the 24 newest snapshots (72 minutes at the default 3-minute interval),
// one per hour for two days and one per day for a month: at most 102 objects.
func DefaultRetention() Retention { return Retention{Recent: 24, Hourly: 48, Daily: 30} }

// Expired returns the snapshots retention no longer keeps, given snapshots oldest first. Objects
// without a checksum are never counted as keepers, so a run of bad uploads cannot push good
// snapshots out.
func (r Retention) Expired(snaps []Snapshot, now time.Time) []Snapshot {
	keep := map[string]bool{}
	var good []Snapshot
	for _, s := range snaps {
		if s.SHA256 != "" && !s.Taken.IsZero() {
			good = append(good, s)
		}
	}
	for i := len(good) - 1; i >= 0 && i >= len(good)-r.Recent; i-- {
		keep[good[i].Name] = true
	}
	tier := func(width time.Duration, count int) {
		seen := map[time.Time]bool{}
		for i := len(good) - 1; i >= 0 && len(seen) < count; i-- { // newest first: the newest of each bucket wins
			if bucket := good[i].Taken.UTC().Truncate(width); !seen[bucket] {
				seen[bucket] = true
				keep[good[i].Name] = true
			}
		}
	}
	tier(time.Hour, r.Hourly)
	tier(24*time.Hour, r.Daily)
	var expired []Snapshot
	for _, s := range snaps {
		if !keep[s.Name] && (s.SHA256 != "" || now.Sub(s.Taken) > 24*time.Hour) {
			expired = append(expired, s)
		}
	}
	return expired
}
