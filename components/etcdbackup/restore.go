package etcdbackup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is what etcdutl needs to rebuild one member from a snapshot.
type Member struct {
	Name    string
	PeerURL string
	// InitialCluster is every member's name=peerURL, as etcd's --initial-cluster.
	InitialCluster string
	// Token is the restored cluster's --initial-cluster-token: new for every restore, so the
	// restored cluster gets a fresh identity no stale member can join.
	Token string
	// DataDir is etcd's --data-dir; on Azure the local disk's mount point, so it is never
	// renamed itself, only its member/ directory.
	DataDir string
}

// RestoreBump is how far a restore moves etcd's revision past the snapshot's, as Kubernetes'
// etcd restore guide advises: beyond every revision the lost cluster handed out after the
// snapshot (a billion writes), so no resource version is handed out twice. The restore also marks
// the revisions before it compacted: every watch resumed from an older one is told to list again.
const RestoreBump = 1_000_000_000

// RestoreMember rebuilds one member's data dir from a snapshot with etcdutl: the object is
// downloaded into the data dir's filesystem and refused unless its size and checksum match; the
// previous member/ directory is kept beside the new one as member.before-restore-<time>.
func RestoreMember(ctx context.Context, s *Store, snap Snapshot, m Member, etcdutl string) error {
	if snap.SHA256 == "" || snap.Size == 0 {
		return fmt.Errorf("snapshot %s has no checksum: a partial object or not one of ours; choose another with SNAPSHOT=<name>", snap.Name)
	}
	if err := notInUse(filepath.Join(m.DataDir, "member", "snap", "db")); err != nil {
		return err
	}
	scratch := filepath.Join(m.DataDir, ".restore")
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	file := filepath.Join(scratch, "snapshot.db")
	if err := download(ctx, s, snap, file); err != nil {
		return err
	}
	revision, err := snapshotRevision(ctx, etcdutl, file)
	if err != nil {
		return err
	}
	rebuilt := filepath.Join(scratch, "data")
	out, err := exec.CommandContext(ctx, etcdutl, "snapshot", "restore", file,
		"--name="+m.Name, "--initial-cluster="+m.InitialCluster, "--initial-cluster-token="+m.Token,
		"--initial-advertise-peer-urls="+m.PeerURL, "--data-dir="+rebuilt,
		fmt.Sprintf("--bump-revision=%d", RestoreBump), "--mark-compacted").CombinedOutput()
	if err != nil {
		return fmt.Errorf("etcdutl snapshot restore %s: %v\n%s", snap.Name, err, out)
	}
	current := filepath.Join(m.DataDir, "member")
	if _, err := os.Stat(current); err == nil {
		if err := os.Rename(current, current+".before-restore-"+time.Now().UTC().Format(timeLayout)); err != nil {
			return err
		}
	}
	if err := os.Rename(filepath.Join(rebuilt, "member"), current); err != nil {
		return err
	}
	record, err := json.Marshal(RestoreRecord{Snapshot: snap.Name, Revision: revision, Token: m.Token})
	if err != nil {
		return err
	}
	return WriteStatus(filepath.Join(m.DataDir, restoreRecordFile), string(record))
}

// RestoreRecord is what a member's restore leaves beside its data for the replay: the snapshot
// and its revision as etcdutl read it from the file (the agent's is only a lower bound).
type RestoreRecord struct {
	Snapshot string `json:"snapshot"`
	Revision int64  `json:"revision"`
	Token    string `json:"token"`
}

const restoreRecordFile = "restored.json"

// ReadRestoreRecord reads the record the last restore of the member with that data dir left.
func ReadRestoreRecord(dataDir string) (RestoreRecord, error) {
	var r RestoreRecord
	data, err := os.ReadFile(filepath.Join(dataDir, restoreRecordFile))
	if err != nil {
		return r, fmt.Errorf("no restore of this member to replay after: %w", err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", restoreRecordFile, err)
	}
	return r, nil
}

// snapshotRevision is the revision a snapshot file holds, as etcdutl reads it.
func snapshotRevision(ctx context.Context, etcdutl, file string) (int64, error) {
	out, err := exec.CommandContext(ctx, etcdutl, "snapshot", "status", file, "--write-out=json").Output()
	if err != nil {
		return 0, fmt.Errorf("etcdutl snapshot status: %w", err)
	}
	var status struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(out, &status); err != nil {
		return 0, fmt.Errorf("etcdutl snapshot status: %w: %s", err, out)
	}
	return max(status.Revision, 1), nil // an empty etcd is at revision 1, which changed no key
}

// notInUse refuses a data dir whose database a running etcd holds: bbolt keeps an exclusive lock
// on it while open.
func notInUse(db string) error {
	f, err := os.Open(db)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("%s is open in a running etcd (%v): stop etcd on this member before restoring", db, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

func download(ctx context.Context, s *Store, snap Snapshot, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := s.Download(ctx, snap, f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Stale prefixes a restored etcd holds that describe apiservers of before the loss: the
// endpoint reconciler's master leases and the apiserver identity leases (kube-system/apiserver-*).
var stalePrefixes = []string{"/registry/masterleases/", "/registry/leases/kube-system/apiserver-"}

// ClearStale deletes what a restore leaves stale, before any apiserver starts on it, and returns
// how many keys went.
func ClearStale(ctx context.Context, cli *clientv3.Client) (int64, error) {
	var deleted int64
	for _, prefix := range stalePrefixes {
		resp, err := cli.Delete(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return deleted, fmt.Errorf("clear %s: %w", prefix, err)
		}
		deleted += resp.Deleted
	}
	return deleted, nil
}
