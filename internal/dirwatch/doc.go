// Package dirwatch reports the changes made in directories, through the
// kernel's change notifications (inotify on Linux), without a goroutine
// and without waiting: Drain reads what the kernel queued since the last
// Drain and returns. The kernel queues a change when the system call that
// makes it returns, so a caller that waited for a process to end, and then
// drains, sees every change that process made in the watched directories.
//
// A Watcher watches directories one by one (Add), not trees: its owner
// adds each directory it walks, and the directories that are created or
// moved in later. A change made to a file through a path outside the
// watched directories (another hard link) is not reported, nor are writes
// through a shared memory mapping that outlive the file's close. When the
// kernel's queue overflowed, Drain says so: changes were lost, and the
// owner must look at everything again.
//
// On other systems New fails with ErrUnsupported.
package dirwatch
