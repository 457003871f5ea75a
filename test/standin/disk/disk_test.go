package disk

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"

	"github.com/clusterforge/clusterforge/test/tier"
)

// What etcd does with its data directory works on the disk, and every flush takes the disk's
// latency: the WAL locked, preallocated and flushed by etcd's own file utilities, bbolt's pwrite
// read back through its mmap.
func TestAsRootDiskFlushesSlowlyAndServesWhatEtcdDoes(t *testing.T) {
	tier.Root(t)
	const latency = 50 * time.Millisecond
	d := Disk{Backing: t.TempDir(), Mountpoint: t.TempDir(), FsyncLatency: latency}
	server, err := d.Mount()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := server.Unmount(); err != nil {
			t.Error(err)
		}
	}()

	if err := os.MkdirAll(filepath.Join(d.Mountpoint, "member", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	// The WAL as etcd's own file utilities open, lock, preallocate and flush it.
	wal, err := fileutil.LockFile(filepath.Join(d.Mountpoint, "member", "wal", "0.wal"), os.O_CREATE|os.O_RDWR, fileutil.PrivateFileMode)
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	defer wal.Close()
	if err := fileutil.Preallocate(wal.File, 1<<20, true); err != nil {
		t.Fatalf("preallocate: %v", err)
	}
	for name, flush := range map[string]func() error{
		"fsync":     func() error { return fileutil.Fsync(wal.File) },
		"fdatasync": func() error { return fileutil.Fdatasync(wal.File) },
	} {
		if _, err := wal.Write([]byte("entry")); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := flush(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if took := time.Since(began); took < latency {
			t.Errorf("%s took %s, less than the disk's %s", name, took, latency)
		}
	}

	db, err := os.OpenFile(filepath.Join(d.Mountpoint, "member", "db"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Truncate(1 << 16); err != nil {
		t.Fatal(err)
	}
	mapped, err := syscall.Mmap(int(db.Fd()), 0, 1<<16, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	defer syscall.Munmap(mapped)
	page := bytes.Repeat([]byte("p"), 4096)
	if _, err := db.WriteAt(page, 8192); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fdatasync(int(db.Fd())); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mapped[8192:8192+4096], page) {
		t.Error("a page written with pwrite is not what the mapping reads")
	}
	if _, err := os.Stat(filepath.Join(d.Backing, "member", "db")); err != nil {
		t.Errorf("the file is not in the disk's backing directory: %v", err)
	}
}

// The command refuses what it cannot serve, naming the flag, before it mounts anything.
func TestMainRefusesBadFlags(t *testing.T) {
	for args, flag := range map[string]string{
		"--mount=/nowhere":                             "--backing",
		"--backing=/nowhere":                           "--mount",
		"--backing=/a --mount=/b --fsync-latency=-1ms": "--fsync-latency",
	} {
		if err := Main(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("disk %s: %v, want an error naming %s", args, err, flag)
		}
	}
}
