package roll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/spec"
)

// memberOrder reorders an etcd stage: members missing from the cluster first (a roll stopped
// between a removal and its replacement leaves one out, and no other may go before it is back),
// the member leading now last (each follower replaced costs no election).
func (r *Roller) memberOrder(ctx context.Context, stage change.Stage) change.Stage {
	cli, err := r.Target.EtcdClient(stage.Role)
	if err != nil {
		return stage
	}
	defer cli.Close()
	leader, members, err := leaderOf(ctx, cli)
	if err != nil {
		return stage
	}
	rank := func(b []string) int {
		switch {
		case !slices.ContainsFunc(members, func(m member) bool { return m.Name == b[0] }):
			return 0
		case b[0] == leader.Name:
			return 2
		}
		return 1
	}
	batches := slices.Clone(stage.Batches)
	slices.SortStableFunc(batches, func(a, b []string) int { return rank(a) - rank(b) })
	stage.Batches = batches
	return stage
}

// memberCount is how many members a spec gives an etcd cluster; 0 for no spec.
func memberCount(c *spec.Cluster, role string) int {
	if c == nil {
		return 0
	}
	for _, e := range c.EtcdClusters() {
		if e.Role == role {
			return len(e.Members)
		}
	}
	return 0
}

// replaceMember replaces one etcd member: quorum re-checked, leadership moved off it, the member
// removed, its machine replaced on an empty disk, and the replacement (added back by its own
// etcd-join) caught up with the leader before the next.
func (r *Roller) replaceMember(ctx context.Context, role, name string) error {
	cli, err := r.Target.EtcdClient(role)
	if err != nil {
		return err
	}
	defer cli.Close()
	if problems := r.etcdProblems(ctx, role); len(problems) > 0 {
		return fmt.Errorf("quorum check before %s: %w", name, errors.Join(problems...))
	}
	if role == spec.RoleEtcdMain {
		if err := r.freshBackup(ctx); err != nil {
			return err
		}
	}
	leader, members, err := leaderOf(ctx, cli)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(members, func(m member) bool { return m.Name == name })
	if i < 0 { // not answering; its replacement wipes it, so it must not be listed either
		list, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(list.Members, func(m *etcdserverpb.Member) bool { return m.Name == name }) {
			return fmt.Errorf("%s is a member of %s but did not answer: it is not replaced while listed (run the roll again)", name, role)
		}
	}
	if want := max(memberCount(r.Applied, role), memberCount(r.Desired, role)); i >= 0 && len(members) < want {
		return fmt.Errorf("%s has %d of its %d members answering: %s is not removed while another is missing (replace the missing member first: the roll, run again, does)", role, len(members), want, name)
	}
	if i >= 0 {
		if leader.Name == name {
			if err := r.moveLeader(ctx, role, leader, members); err != nil {
				return err
			}
		}
		if err := r.Target.StopEtcd(ctx, name); err != nil {
			return fmt.Errorf("stop etcd on %s: %w", name, err)
		}
		// Through the other members: the one removed stops as the removal applies, and would
		// answer its own request with "server stopped".
		var others []string
		for _, m := range members {
			if m.Name != name {
				others = append(others, m.Name)
			}
		}
		rest, err := r.Target.EtcdClient(role, others...)
		if err != nil {
			return err
		}
		defer rest.Close()
		// etcd itself refuses a removal that would leave fewer members active than a quorum, as
		// while the last replacement has been connected for under its health interval: wait.
		if err := poll(ctx, "remove member "+name, func() error {
			_, err := rest.MemberRemove(ctx, members[i].ID)
			switch {
			case errors.Is(err, rpctypes.ErrMemberNotFound):
				return nil // an earlier attempt did it
			case err != nil && !errors.Is(err, rpctypes.ErrUnhealthy):
				return permanent{err}
			}
			return err
		}); err != nil {
			return err
		}
		r.logf("%s: removed from %s (%d voters remain)", name, role, len(members)-1)
	}
	if err := r.Target.Replace(ctx, name); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	r.logf("%s: replaced; waiting until it has joined and caught up", name)
	return r.caughtUp(ctx, cli, role, name)
}

// member is one etcd member with its status.
type member struct {
	Name      string
	ID        uint64
	URL       string
	RaftIndex uint64
}

// leaderOf finds the leader and lists the started members with their raft index.
func leaderOf(ctx context.Context, cli *clientv3.Client) (member, []member, error) {
	list, err := cli.MemberList(ctx)
	if err != nil {
		return member{}, nil, err
	}
	var members []member
	var leaderID uint64
	for _, m := range list.Members {
		if len(m.ClientURLs) == 0 {
			continue
		}
		st, err := cli.Status(ctx, m.ClientURLs[0])
		if err != nil {
			continue
		}
		leaderID = st.Leader
		members = append(members, member{Name: m.Name, ID: m.ID, URL: m.ClientURLs[0], RaftIndex: st.RaftIndex})
	}
	i := slices.IndexFunc(members, func(m member) bool { return m.ID == leaderID })
	if i < 0 {
		return member{}, members, errors.New("no member reports a leader that answers")
	}
	return members[i], members, nil
}

// moveLeader hands leadership to the most caught-up follower, through the leader itself.
func (r *Roller) moveLeader(ctx context.Context, role string, leader member, members []member) error {
	var to member
	for _, m := range members {
		if m.ID != leader.ID && m.RaftIndex >= to.RaftIndex {
			to = m
		}
	}
	if to.ID == 0 {
		return errors.New("no follower to hand leadership to")
	}
	c, err := r.Target.EtcdClient(role, leader.Name) // MoveLeader is the leader's to answer
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.MoveLeader(ctx, to.ID); err != nil {
		return fmt.Errorf("move leadership from %s to %s: %w", leader.Name, to.Name, err)
	}
	r.logf("%s: leadership moved to %s", leader.Name, to.Name)
	return nil
}

// caughtUp waits until the named member has started, answers, is a voter and has applied the
// leader's raft index as it was when the wait began, and no member reports a problem.
func (r *Roller) caughtUp(ctx context.Context, cli *clientv3.Client, role, name string) error {
	var target uint64
	if err := poll(ctx, name+" to catch up", func() error {
		leader, members, err := leaderOf(ctx, cli)
		if err != nil {
			return err
		}
		if target == 0 {
			target = leader.RaftIndex
		}
		i := slices.IndexFunc(members, func(m member) bool { return m.Name == name })
		if i < 0 {
			return fmt.Errorf("%s has not started", name)
		}
		if members[i].RaftIndex < target {
			return fmt.Errorf("%s is at raft index %d, the leader was at %d", name, members[i].RaftIndex, target)
		}
		if problems := r.etcdProblems(ctx, role); len(problems) > 0 {
			return errors.Join(problems...)
		}
		return nil
	}); err != nil {
		return err
	}
	// etcd counts a member as active, for the quorum check of the next removal, once it has been
	// connected for its health interval.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(etcdHealthInterval):
	}
	return nil
}

// etcdHealthInterval is etcd's HealthInterval, how long a member must have been active to count.
const etcdHealthInterval = 5 * time.Second
