package etcdbackup

import "time"

// Retention is how many snapshots are kept in each tier.
type Retention struct {
	// Recent is how many of the newest snapshots are kept whatever their age. Default 24.
	Recent int
	// Hourly is how many hours back the newest snapshot of each hour is kept. Default 48.
	Hourly int
	// Daily is how many days back the newest snapshot of each day is kept. Default 30.
	Daily int
}

// DefaultRetention keeps two hours of 5-minute snapshots, two days of hourly ones and a month of
// daily ones: at most 102 objects.
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
		for i := len(good) - 1; i >= 0; i-- { // newest first: the newest of each bucket wins
			bucket := good[i].Taken.UTC().Truncate(width)
			if now.Sub(bucket) >= time.Duration(count)*width || seen[bucket] {
				continue
			}
			seen[bucket] = true
			keep[good[i].Name] = true
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
