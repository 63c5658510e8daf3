// Package dockerbackend owns the docker tool backend: one container per
// session, made from the configured image on the Docker Engine API (the
// moby client, over DOCKER_HOST or the default unix socket), with the
// session's workdir mounted at the same path. The shell tool runs in it with
// exec; the file tools keep running on the daemon's side of the same
// directory, confined as on the local backend. A container is removed when
// its session closes or changes backend, when the daemon stops, and at the
// next start of a daemon that was killed (Engine.Reap).
package dockerbackend
