#!/usr/bin/env bash
# Build the pinned rclone that bench/sync_bench.py runs against portable.transfer.sync.
#
#   bench/install-rclone.sh            # prints the binary's path; builds it only when absent
#
# The version is pinned below (a version `go list -m -versions github.com/rclone/rclone` lists).
# It is built with `go install` (niced: the machine is shared) into
# ${XDG_CACHE_HOME:-~/.cache}/portable/rclone-<version>/rclone. If `go install pkg@version` is
# refused (rclone's go.mod has replace directives), it is built from a small go.mod of our own that
# requires rclone at that version.
set -euo pipefail

RCLONE_VERSION="${RCLONE_VERSION:-v1.76.0}"
DEST="${XDG_CACHE_HOME:-$HOME/.cache}/portable/rclone-${RCLONE_VERSION}"
BIN="$DEST/rclone"

if [[ -x "$BIN" ]]; then
    echo "$BIN"
    exit 0
fi
command -v go >/dev/null || { echo "install-rclone: go is not on PATH (rclone is built from source)" >&2; exit 1; }
if ! go list -m -versions github.com/rclone/rclone | tr ' ' '\n' | grep -qx "$RCLONE_VERSION"; then
    echo "install-rclone: $RCLONE_VERSION is not a listed rclone version" >&2
    exit 1
fi
mkdir -p "$DEST"
if ! GOBIN="$DEST" GOFLAGS=-mod=mod nice -n 19 go install "github.com/rclone/rclone@${RCLONE_VERSION}" >&2; then
    echo "install-rclone: go install failed; building from a go.mod of our own" >&2
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    cd "$work"
    go mod init portable-bench/rclone >&2
    printf 'package main\n\nimport _ "github.com/rclone/rclone"\n' >tools.go
    GOFLAGS=-mod=mod go get "github.com/rclone/rclone@${RCLONE_VERSION}" >&2
    GOFLAGS=-mod=mod nice -n 19 go build -o "$BIN" github.com/rclone/rclone >&2
fi
"$BIN" version >&2
echo "$BIN"
