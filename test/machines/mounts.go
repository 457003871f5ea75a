package machines

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/moby/sys/mountinfo"
)

// DetachMounts detaches every mount at or below dir, deepest first (MNT_DETACH: a mount whose
// files are still open goes once they are closed): what a rehearsal mounted, such as the disk
// stand-ins and their tmpfs, must not outlive it, and a stand-in that was killed leaves a dead
// mount behind.
func DetachMounts(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(abs))
	if err != nil {
		return err
	}
	slices.SortFunc(mounts, func(a, b *mountinfo.Info) int { return len(b.Mountpoint) - len(a.Mountpoint) })
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m.Mountpoint, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, &os.PathError{Op: "unmount", Path: m.Mountpoint, Err: err})
		}
	}
	return errors.Join(errs...)
}

// Mounted is whether dir is a mount point.
func Mounted(dir string) bool {
	mounted, err := mountinfo.Mounted(dir)
	return err == nil && mounted
}
