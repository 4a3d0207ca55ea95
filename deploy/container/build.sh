#!/usr/bin/env bash
# Builds the runtime image of deploy/container/Containerfile from a binary
# cargo built on this machine: gathers the binary, the shared libraries it
# links (as ldd resolves them here), the CA certificates and a passwd entry
# into a build context, then runs `podman build` (or $CONTAINER_TOOL:
# buildah bud, docker build).
#
#   deploy/container/build.sh [BINARY] [TAG]
#   (defaults: target/release/outbox, localhost/outbox:latest)
set -euo pipefail
umask 022
here="$(cd "$(dirname "$0")" && pwd)"
binary="${1:-target/release/outbox}"
tag="${2:-localhost/outbox:latest}"
tool="${CONTAINER_TOOL:-podman}"
[ -x "$binary" ] || { echo "build.sh: no executable at $binary (cargo build --release -p outbox-cli --features sqs)" >&2; exit 1; }

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
root="$context/rootfs"
install -D -m 0755 "$binary" "$root/usr/local/bin/outbox"
# Every library the binary loads, and the loader, at the paths it expects.
ldd "$binary" | awk '/=> \// { print $3 } /^[[:space:]]*\/[^ ]+ \(/ { print $1 }' | sort -u |
  while read -r lib; do
    install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi
install -d "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
echo 'outbox:x:65532:65532:outbox:/nonexistent:/usr/local/bin/outbox' >"$root/etc/passwd"
echo 'outbox:x:65532:' >"$root/etc/group"
cp "$here/Containerfile" "$context/Containerfile"
"$tool" build -t "$tag" -f "$context/Containerfile" "$context"
