// Package sshbackend owns the ssh tool backend: it connects to a host with
// golang.org/x/crypto/ssh (known_hosts verification, key or agent auth) and
// offers shell, read_file, write_file and list_dir that act on the remote
// account, confined to the remote workdir. A stopped shell call's remote
// process group is ended from a second session (stop.go).
package sshbackend
