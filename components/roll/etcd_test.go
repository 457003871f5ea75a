package roll

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/toolchain"
)

// etcdTarget is a Target of one real etcd member; a member's stop and replacement are recorded.
type etcdTarget struct {
	Target
	endpoint string
	touched  []string
}

func (f *etcdTarget) EtcdClient(string, ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{f.endpoint}, DialTimeout: 5 * time.Second})
}
func (f *etcdTarget) StopEtcd(_ context.Context, name string) error {
	f.touched = append(f.touched, "stop "+name)
	return nil
}
func (f *etcdTarget) Replace(_ context.Context, name string) error {
	f.touched = append(f.touched, "replace "+name)
	return nil
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// An events etcd left with two of its three members, as a roll stopped between a removal and
// the replacement leaves it: the roll orders the missing member first, and refuses to remove a
// member present, whose removal would leave one voter of three, before anything is stopped.
func TestRealEtcdNoMemberRemovedWhileAnotherIsMissing(t *testing.T) {
	c, err := spec.LoadStack(filepath.Join("..", "..", spec.StackDir, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range c.EtcdClusters() {
		if e.Role == spec.RoleEtcdEvents {
			for _, m := range e.Members {
				names = append(names, m.Name)
			}
		}
	}
	// Two of the three members run; the third was removed and not replaced.
	clients, peers := []string{freePort(t), freePort(t)}, []string{freePort(t), freePort(t)}
	initial := names[0] + "=http://" + peers[0] + "," + names[1] + "=http://" + peers[1]
	for i := range 2 {
		etcd := exec.Command(toolchain.Binary(t, "bin/etcd"), "--name="+names[i], "--data-dir="+t.TempDir(),
			"--listen-client-urls=http://"+clients[i], "--advertise-client-urls=http://"+clients[i],
			"--listen-peer-urls=http://"+peers[i], "--initial-advertise-peer-urls=http://"+peers[i], "--initial-cluster="+initial)
		if err := etcd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = etcd.Process.Kill(); _ = etcd.Wait() })
	}
	client := clients[0]
	target := &etcdTarget{endpoint: client}
	r := &Roller{Target: target, Desired: c}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := poll(ctx, "etcd up", func() error {
		cli, err := target.EtcdClient("")
		if err != nil {
			return err
		}
		defer cli.Close()
		_, _, err = leaderOf(ctx, cli)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	cli, err := target.EtcdClient("")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	leader, _, err := leaderOf(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	follower := names[0]
	if leader.Name == follower {
		follower = names[1]
	}
	stage := change.Stage{Role: spec.RoleEtcdEvents, Kind: change.EtcdMember, Batches: [][]string{{leader.Name}, {follower}, {names[2]}}}
	if got, want := fmt.Sprint(r.memberOrder(ctx, stage).Batches), fmt.Sprint([][]string{{names[2]}, {follower}, {leader.Name}}); got != want {
		t.Errorf("member order %s, want the missing member first and the leader last: %s", got, want)
	}
	err = r.replaceMember(ctx, spec.RoleEtcdEvents, follower)
	if err == nil || !strings.Contains(err.Error(), "has 2 of its 3 members answering") {
		t.Errorf("replacing a follower while a member is missing: %v, want a refusal naming the missing member", err)
	}
	if len(target.touched) > 0 {
		t.Errorf("members were touched: %v", target.touched)
	}
}
