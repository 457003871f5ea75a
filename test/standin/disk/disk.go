// Package disk stands in for an etcd machine's local disk (deviation "local disk"): a FUSE
// file system over a directory (on tmpfs, RAM) whose every file fsync and fdatasync takes a
// fixed, stated latency. Each etcd member gets a device of its own with a known flush time, where
// on this machine every member would otherwise share its one disk and that disk's own latency.
// A directory's fsync is not delayed (go-fuse's loopback answers it), nor are reads and writes,
// which a kernel that offers FUSE passthrough sends to the backing file without the stand-in.
package disk

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Command is the subcommand that serves a disk (Main).
const Command = "disk"

// Disk is one device: the directory holding its files, where it is mounted and how long a
// flush takes.
type Disk struct {
	Backing, Mountpoint string
	FsyncLatency        time.Duration
}

// Mount serves the disk until the returned server is unmounted. It needs root (mount(2)).
func (d Disk) Mount() (*fuse.Server, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(d.Backing, &st); err != nil {
		return nil, err
	}
	root := &fs.LoopbackRoot{Path: d.Backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, latency: d.FsyncLatency}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	return fs.Mount(d.Mountpoint, root.RootNode, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMountStrict: true, FsName: "clusterforge-disk", Name: Command,
	}})
}

// node is a loopback node whose open files flush slowly.
type node struct {
	fs.LoopbackNode
	latency time.Duration
}

var (
	_ fs.NodeOpener  = (*node)(nil)
	_ fs.NodeCreater = (*node)(nil)
)

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.slow(fh), fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return in, n.slow(fh), fuseFlags, 0
}

func (n *node) slow(fh fs.FileHandle) fs.FileHandle {
	return &file{LoopbackFile: fh.(*fs.LoopbackFile), latency: n.latency}
}

// file is a loopback file whose flush waits the disk's latency first.
type file struct {
	*fs.LoopbackFile
	latency time.Duration
}

var _ fs.FileFsyncer = (*file)(nil)

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	time.Sleep(f.latency)
	return f.LoopbackFile.Fsync(ctx, flags)
}

// Main is `disk --backing=<dir> --mount=<dir> --fsync-latency=<duration>`: the disk served until
// SIGTERM, then unmounted.
func Main(args []string) error {
	flags := flag.NewFlagSet(Command, flag.ContinueOnError)
	var d Disk
	flags.StringVar(&d.Backing, "backing", "", "directory holding the disk's files (on tmpfs)")
	flags.StringVar(&d.Mountpoint, "mount", "", "directory to mount the disk on")
	flags.DurationVar(&d.FsyncLatency, "fsync-latency", 0, "how long every fsync and fdatasync takes")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if d.Backing == "" || d.Mountpoint == "" {
		return errors.New("disk: --backing and --mount are required")
	}
	if d.FsyncLatency < 0 {
		return fmt.Errorf("disk: --fsync-latency %s is not a flush latency (0 or more)", d.FsyncLatency)
	}
	// Caught before the mount, so that a stop while mounting still unmounts.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	server, err := d.Mount()
	if err != nil {
		return fmt.Errorf("disk: mount %s: %w", d.Mountpoint, err)
	}
	log.Printf("%s mounted on %s, every flush %s", d.Backing, d.Mountpoint, d.FsyncLatency)
	go func() {
		<-ctx.Done()
		if err := server.Unmount(); err != nil {
			// Files still open: detach it now; it goes once they are closed.
			log.Printf("unmount %s: %v; detaching it", d.Mountpoint, err)
			_ = syscall.Unmount(d.Mountpoint, syscall.MNT_DETACH)
		}
	}()
	server.Wait()
	return nil
}
