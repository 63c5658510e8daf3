//go:build !linux

package workspace

import "io/fs"

// localDevice: a Watch cannot watch here (dirwatch has no notifications).
func localDevice(string) (dev uint64, local bool, err error) { return 0, false, nil }

func devIno(fs.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }

func links(fs.FileInfo) uint64 { return 1 }
