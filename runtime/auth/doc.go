// Package auth owns who a caller is: the daemon's auth token (created in
// the home directory with mode 0600, loaded across restarts, compared in
// constant time), which is the built-in admin, and API keys of stored
// principals (made random, kept as hashes, refused once revoked or
// expired). It also orders the roles (Allows) and carries the caller's
// Principal in a context. Which role a method needs is runtime/rpc's
// generated table.
package auth
