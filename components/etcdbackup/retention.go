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
// one per hour for two days and one per day for a month, and the two newest verified: at most
// 104 objects.
func DefaultRetention() Retention { return Retention{Recent: 24, Hourly: 48, Daily: 30} }

// Expired returns the snapshots retention no longer keeps, given snapshots oldest first. The
// two newest verified snapshots are always kept (a restore falls back from the first to the
// second, each with its delta chain), and each hour's or day's keeper is its newest verified
// snapshot when it has one, so a newer unverified one never pushes a restorable point out.
// Objects without a checksum are never counted as keepers, so a run of bad uploads cannot push
// good snapshots out.
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
	for _, s := range newestVerified(good, 2) {
		keep[s.Name] = true
	}
	tier := func(width time.Duration, count int) {
		keeper := map[time.Time]Snapshot{}
		var buckets []time.Time
		for i := len(good) - 1; i >= 0; i-- { // newest first
			bucket := good[i].Taken.UTC().Truncate(width)
			k, seen := keeper[bucket]
			switch {
			case !seen && len(buckets) == count:
			case !seen:
				buckets = append(buckets, bucket)
				keeper[bucket] = good[i]
			case k.Verified.IsZero() && !good[i].Verified.IsZero():
				keeper[bucket] = good[i]
			}
		}
		for _, k := range keeper {
			keep[k.Name] = true
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

// newestVerified returns up to n verified snapshots, newest first, of snaps oldest first.
func newestVerified(snaps []Snapshot, n int) []Snapshot {
	var out []Snapshot
	for i := len(snaps) - 1; i >= 0 && len(out) < n; i-- {
		if !snaps[i].Verified.IsZero() && snaps[i].SHA256 != "" {
			out = append(out, snaps[i])
		}
	}
	return out
}

// ExpiredDeltas returns the deltas no restore needs: those wholly at or before the revision of
// the second-newest verified snapshot, which with its chain is the fallback of the newest. With
// fewer than two verified snapshots, none.
func ExpiredDeltas(snaps []Snapshot, deltas []Delta) []Delta {
	bases := newestVerified(snaps, 2)
	if len(bases) < 2 {
		return nil
	}
	var expired []Delta
	for _, d := range deltas {
		if d.SHA256 != "" && d.To <= bases[1].Revision {
			expired = append(expired, d)
		}
	}
	return expired
}
