#!/usr/bin/env bash
# first-run.sh [DIR] [full]: the README's run command as on a fresh machine,
# timed. With "full", the same command without -tags trellis_lean (the
# default build, every provider SDK included): the baseline of
# docs/performance.md.
#
# HOME is a new empty directory, so the Go module cache, the Go build cache
# and ~/.trellis start empty; /usr/bin/time -v reports wall time, CPU and
# peak memory. DIR (default: this checkout) is the source to build; export a
# commit with `git archive <commit> | tar -x -C DIR` to compare two. The
# daemon the run starts is stopped and the temporary HOME removed at the end.
# docs/performance.md ("First build of the README's run command") has the
# figures.
set -u
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
tags=(-tags trellis_lean)
[ "${2:-}" = full ] && tags=()
work=$(mktemp -d)
export HOME=$work/home GOFLAGS=-modcacherw GOTOOLCHAIN=local
unset GOCACHE GOMODCACHE GOPATH
mkdir -p "$HOME"
cd "$src" || exit 1
echo "start $(date -u +%FT%TZ), $(uptime | sed 's/.*load/load/')"
/usr/bin/time -v -o "$work/time" go run "${tags[@]}" ./cmd/trellis run "hello" >"$work/out" 2>"$work/err"
echo "exit $?, end $(date -u +%FT%TZ), $(uptime | sed 's/.*load/load/')"
grep -E 'Elapsed|User time|System time|Maximum resident' "$work/time"
head -c 200 "$work/out"; echo
echo "modules downloaded: $(grep -c 'go: downloading' "$work/err")"
echo "packages linked: $(go list -deps "${tags[@]}" ./cmd/trellis | wc -l)"
go run "${tags[@]}" ./cmd/trellis stop
chmod -R u+w "$work"; rm -rf "$work"
