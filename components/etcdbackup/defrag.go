package etcdbackup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefragPolicy says which members are worth defragmenting: a defragmentation stops its member
// serving while it rewrites the database, so one that would free little is skipped.
type DefragPolicy struct {
	// A member is defragmented only when its database has at least MinFreeBytes free and that is
	// at least MinFreeShare of its size.
	MinFreeBytes int64
	MinFreeShare float64
}

// DefaultDefragPolicy frees at least 256 MiB and a fifth of the database, as Gardener's default
// threshold does roughly: less is not worth a member's pause.
func DefaultDefragPolicy() DefragPolicy {
	return DefragPolicy{MinFreeBytes: 256 << 20, MinFreeShare: 0.2}
}

// DefragEvery is how often the leader's agent runs a pass.
const DefragEvery = 24 * time.Hour

// DefragStep is one member's part of a pass.
type DefragStep struct {
	Member string
	Leader bool
	// Before and After are the database's size, InUse the part holding data, in bytes.
	Before, After, InUse int64
	// Skipped says why the member was left alone, if it was.
	Skipped string
	Seconds float64
}

func (s DefragStep) String() string {
	role := "follower"
	if s.Leader {
		role = "leader"
	}
	if s.Skipped != "" {
		return fmt.Sprintf("%s (%s): skipped, %s", s.Member, role, s.Skipped)
	}
	return fmt.Sprintf("%s (%s): %.1f MiB to %.1f MiB in %.1f s", s.Member, role, float64(s.Before)/(1<<20), float64(s.After)/(1<<20), s.Seconds)
}

// Defragment defragments the members worth it, one at a time, followers first and the leader
// last, behind the gate rolls use: it starts only when SafeToTouch says so, and before each
// member every member must be whole again. It stops at the first problem.
func Defragment(ctx context.Context, cli *clientv3.Client, s *Store, maxAge time.Duration, policy DefragPolicy) ([]DefragStep, error) {
	if err := SafeToTouch(ctx, cli, s, maxAge); err != nil {
		return nil, err
	}
	list, err := cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	type member struct {
		name, url string
		leader    bool
	}
	var members []member
	for _, m := range list.Members {
		st, err := cli.Status(ctx, m.ClientURLs[0]) // SafeToTouch saw each started
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", m.Name, err)
		}
		members = append(members, member{name: m.Name, url: m.ClientURLs[0], leader: st.Leader == m.ID})
	}
	slices.SortStableFunc(members, func(a, b member) int {
		if a.leader != b.leader {
			return map[bool]int{true: 1, false: -1}[a.leader]
		}
		return cmp.Compare(a.name, b.name)
	})
	var steps []DefragStep
	for _, m := range members {
		if problems := MemberProblems(ctx, cli); len(problems) > 0 {
			return steps, fmt.Errorf("stopped before %s: %v", m.name, problems)
		}
		st, err := cli.Status(ctx, m.url)
		if err != nil {
			return steps, fmt.Errorf("member %s: %w", m.name, err)
		}
		step := DefragStep{Member: m.name, Leader: m.leader, Before: st.DbSize, After: st.DbSize, InUse: st.DbSizeInUse}
		free := st.DbSize - st.DbSizeInUse
		if free < policy.MinFreeBytes || float64(free) < policy.MinFreeShare*float64(st.DbSize) {
			step.Skipped = fmt.Sprintf("%d MiB free of %d MiB", free>>20, st.DbSize>>20)
			steps = append(steps, step)
			continue
		}
		began := time.Now()
		if _, err := cli.Defragment(ctx, m.url); err != nil {
			return steps, fmt.Errorf("defragment %s: %w", m.name, err)
		}
		step.Seconds = time.Since(began).Seconds()
		if st, err = cli.Status(ctx, m.url); err != nil {
			return steps, fmt.Errorf("member %s after its defragmentation: %w", m.name, err)
		}
		step.After = st.DbSize
		steps = append(steps, step)
	}
	return steps, nil
}
