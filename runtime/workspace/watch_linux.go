//go:build linux

package workspace

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// localDevice returns the device of root, and whether root is on a file
// system whose every change the kernel reports here: a local one, not a
// network or user-space one, where another machine or process writes
// unseen.
func localDevice(root string) (dev uint64, local bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return 0, false, err
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.F2FS_SUPER_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, 0x2fc12fc1 /* zfs */ :
	default:
		return 0, false, nil
	}
	var s unix.Stat_t
	if err := unix.Stat(root, &s); err != nil {
		return 0, false, err
	}
	return s.Dev, true, nil
}

// devIno returns the device and inode of a file.
func devIno(info fs.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Dev, st.Ino, true
}

// links returns how many hard links a file has (1 when unknown).
func links(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
