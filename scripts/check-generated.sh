#!/usr/bin/env bash
# Regenerates every generated file from proto/ and fails when any differs
# from what is committed (or when generation adds an untracked file).
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(proto docs/protocol.md docs/roles.md facade/methods sdk/src/protocol.ts protocol/errcode/codes.gen.go runtime/rpc/authz.gen.go client/calls.gen.go protocol/events/payloads.gen.go)
go tool -modfile=tools/go.mod buf generate
if ! git diff --quiet --exit-code -- "${paths[@]}" || [ -n "$(git status --porcelain --untracked-files=all -- "${paths[@]}")" ]; then
  echo "generated code drifted from proto/: these files differ from a fresh 'buf generate':" >&2
  git status --porcelain --untracked-files=all -- "${paths[@]}" >&2
  git --no-pager diff --stat -- "${paths[@]}" >&2
  echo "run: go tool -modfile=tools/go.mod buf generate   and commit the result" >&2
  exit 1
fi
echo "generated code matches proto/"
