// Package workspace records a session's working directory as a manifest
// of content-addressed entries and puts it back: Snapshot walks a directory
// into a Manifest (each regular file by its SHA-256, each symlink by its
// target, never followed, each directory by its mode), recording as
// skipped, never silently leaving out, what ignore rules match
// (.gitignore-style: the workdir's .gitignore and .trellisignore, and .git,
// then the paths its caller excludes, such as the daemon's home: Exclude)
// and files larger than the size limit, keeping in memory, up to a bound,
// the contents it read (with a Watch, a snapshot after the first reads
// only the paths the kernel reported changed: internal/dirwatch); Save stores the file contents a Blobs does not
// hold yet (those kept as they were hashed, the others read again and
// checked) and the manifest itself, in chunks of one gzip stream (in
// uncompressed blocks when the content looks incompressible), in one Put
// (one store transaction); Diff renders two
// manifests, or a manifest and the directory, as a unified diff; Restore
// makes a directory hold exactly a manifest's entries again, leaving what
// the manifest skipped as it is.
//
// It knows nothing of sessions or of the store: a Blobs is the content
// store of one session, adapted by its caller.
package workspace
