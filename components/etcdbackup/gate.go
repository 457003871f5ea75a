package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RestoreNeeded starts the status a member writes when it refuses to start a new cluster.
const RestoreNeeded = "restore-needed"

// MayBootstrap answers whether a member whose data dir is empty and whose peers do not answer may
// start a new cluster: only when neither the registry nor the store knows an etcd cluster of this
// name that an operator has not retired. An unreachable store or registry proves nothing, so it is
// a refusal too.
func MayBootstrap(ctx context.Context, s *Store, r *Registry) error {
	existed, err := Existed(ctx, s, r)
	if err != nil {
		return fmt.Errorf("%s: cannot tell whether %s existed before (%v); waiting for its peers or the store", RestoreNeeded, r.Cluster, err)
	}
	if len(existed.Unretired) > 0 {
		return fmt.Errorf("%s: %s existed since %s (etcd cluster %s, not retired), this member's data dir is empty and no quorum answers; "+
			"waiting for its peers. If a majority lost their disks, restore: make etcd-restore (docs/runbooks/etcd.md)",
			RestoreNeeded, r.Cluster, existed.Since.UTC().Format(time.RFC3339), strings.Join(existed.Unretired, ", "))
	}
	return nil
}

// SafeToTouch answers whether etcd may be changed now (a roll, a resize, a restart): every member
// started, healthy and a voter, no alarm, and a verified snapshot younger than maxAge. It returns
// every reason it is not.
func SafeToTouch(ctx context.Context, cli *clientv3.Client, s *Store, maxAge time.Duration) error {
	problems := MemberProblems(ctx, cli)
	if err := freshVerifiedSnapshot(ctx, s, maxAge); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("not safe to touch etcd: %w", errors.Join(problems...))
	}
	return nil
}

// MemberProblems lists why an etcd cluster is not whole: a member not started, unhealthy or a
// learner, or an alarm raised. None for a cluster a roll may take a member from.
func MemberProblems(ctx context.Context, cli *clientv3.Client) []error {
	var problems []error
	members, err := cli.MemberList(ctx)
	if err != nil {
		return []error{fmt.Errorf("member list: %w", err)}
	}
	for _, m := range members.Members {
		switch {
		case m.IsLearner:
			problems = append(problems, fmt.Errorf("member %s is a learner, still catching up", m.Name))
		case len(m.ClientURLs) == 0:
			problems = append(problems, fmt.Errorf("member %x (%s) has not started", m.ID, m.PeerURLs))
		default:
			status, err := cli.Status(ctx, m.ClientURLs[0])
			if err == nil && len(status.Errors) > 0 {
				err = errors.New(status.Errors[0])
			}
			if err != nil {
				problems = append(problems, fmt.Errorf("member %s is not healthy: %v", m.Name, err))
			}
		}
	}
	if alarms, err := cli.AlarmList(ctx); err != nil {
		problems = append(problems, fmt.Errorf("alarm list: %v", err))
	} else if len(alarms.Alarms) > 0 {
		problems = append(problems, fmt.Errorf("alarm raised: %v", alarms.Alarms[0].Alarm))
	}
	return problems
}

func freshVerifiedSnapshot(ctx context.Context, s *Store, maxAge time.Duration) error {
	snaps, err := s.List(ctx)
	if err != nil {
		return fmt.Errorf("backup store: %v", err)
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if snaps[i].Verified.IsZero() {
			continue
		}
		if age := time.Since(snaps[i].Taken); age > maxAge {
			return fmt.Errorf("the newest verified snapshot %s is %s old, over %s: take one with make etcd-backup", snaps[i].Name, age.Round(time.Second), maxAge)
		}
		return nil
	}
	return fmt.Errorf("no verified snapshot of %s: take one with make etcd-backup", s.Cluster)
}
