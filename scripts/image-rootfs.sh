#!/usr/bin/env bash
# The two trees the container image is made of, shared by scripts/image.sh (no Docker
# engine) and the Dockerfile (one), so that both images hold the same files:
#
#   image-rootfs.sh base DEST NODE   the runtime: NODE (the Node 24 binary), stripped, the
#                                    shared libraries it links (as ldd lists them), the CA
#                                    certificates, /etc/passwd and /etc/group with the
#                                    non-root user 65532, an empty /tmp. No shell, no
#                                    package manager: nothing else.
#   [NODE=node24] image-rootfs.sh app DEST
#                                    the application for /app: the CLI and the controller
#                                    bundled with their production dependencies into a
#                                    few ES modules (scripts/bundle.ts: main.mjs, the
#                                    chunks it loads on demand, the dashboard's files, Node's
#                                    compile cache for the user 65532 and the dependencies'
#                                    licences), without the test bed.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "image-rootfs: $*" >&2
  exit 2
}

need() {
  command -v "$1" >/dev/null || die "$1 is missing: install it with  apt-get install -y $2"
}

base() {
  local dest=$1 node=$2
  need ldd libc-bin
  [ -x "$node" ] || die "no Node binary at $node"
  mkdir -p "$dest/usr/local/bin" "$dest/etc/ssl/certs" "$dest/tmp"
  chmod 1777 "$dest/tmp"
  install -m 0755 "$node" "$dest/usr/local/bin/node"
  # The npm package's binary keeps its debug information: 18 MB nobody reads at run time.
  if command -v strip >/dev/null; then strip --strip-all "$dest/usr/local/bin/node"; fi

  # What the dynamic loader loads for node: the loader itself and each library ldd
  # resolves, copied (symbolic links followed) to the path the loader looks for it at.
  local lib
  for lib in $(ldd "$node" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
    mkdir -p "$dest$(dirname "$lib")"
    cp -L "$lib" "$dest$lib"
  done
  # Debian's loader searches the multiarch directories without an /etc/ld.so.cache.

  local certs=/etc/ssl/certs/ca-certificates.crt
  [ -s "$certs" ] || die "no CA certificates at $certs: install them with  apt-get install -y ca-certificates"
  install -m 0644 "$certs" "$dest$certs"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' \
    >"$dest/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$dest/etc/group"
  printf '%s\n' 'hosts: files dns' >"$dest/etc/nsswitch.conf"
  chmod 0644 "$dest/etc/passwd" "$dest/etc/group" "$dest/etc/nsswitch.conf"
}

app() {
  local dest=$1
  mkdir -p "$dest"
  # Node 24 (which strips the types of scripts/*.ts): $NODE, else the one on PATH.
  # Node's compile cache is kept per user: the bundle carries the image user's (65532).
  "${NODE:-node}" scripts/bundle.ts "$dest" --cache-uid 65532
  chmod -R a+rX,go-w "$dest"
}

case "${1:-}" in
  base) [ $# -eq 3 ] || die "usage: image-rootfs.sh base DEST NODE"; base "$2" "$3" ;;
  app) [ $# -eq 2 ] || die "usage: image-rootfs.sh app DEST"; app "$2" ;;
  *) die "usage: image-rootfs.sh base DEST NODE | app DEST" ;;
esac
