#!/usr/bin/env bash
# Builds the container image without a Docker engine, as an OCI image layout (a
# directory any registry client can push: `skopeo copy oci:DIR:TAG docker://...`).
#
#   scripts/image.sh [--out DIR] [--target controller|cli|all]
#
# Two layers, the trees scripts/image-rootfs.sh assembles (the Dockerfile's stages
# assemble the same ones): the runtime (Node 24 from the npm package `node` this
# repository runs on, the libraries it links, CA certificates, the user 65532) and the
# application in /app. Two targets share them and differ in their configuration only:
#   controller  tag <version>      entrypoint node /app/main.mjs, command `controller`
#   cli         tag <version>-cli  the same entrypoint, no command: `... IMAGE status`, `... IMAGE gate`
# Both run as 65532:65532 and need nothing writable but /tmp. The tool is umoci
# (Debian's package): it writes the layout, the layers and the configuration without
# a daemon and without root (docs/decisions.md, "The container image without an engine").
set -euo pipefail
cd "$(dirname "$0")/.."

out=.build/image
target=all
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    *) echo "usage: scripts/image.sh [--out DIR] [--target controller|cli|all]" >&2; exit 2 ;;
  esac
done
case "$target" in controller | cli | all) ;; *) echo "image: unknown target $target" >&2; exit 2 ;; esac
command -v umoci >/dev/null || { echo "image: umoci is missing: install it with  apt-get install -y umoci" >&2; exit 2; }

node=$(readlink -f node_modules/node/bin/node 2>/dev/null || true)
[ -x "$node" ] || { echo "image: no Node binary in node_modules/node: run  npm ci" >&2; exit 2; }
export PATH="$(dirname "$node"):$PATH"
version=$(node -p 'require("./package.json").version')
arch=$(node -p 'process.arch === "x64" ? "amd64" : process.arch')

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
bash scripts/image-rootfs.sh base "$stage/base" "$node"
NODE=$node bash scripts/image-rootfs.sh app "$stage/app"

[ -f "$out/index.json" ] || umoci init --layout "$out"
layers="$out:build-$version"
umoci rm --image "$layers" 2>/dev/null || true
umoci new --image "$layers"
umoci insert --image "$layers" --history.created_by 'scripts/image-rootfs.sh base' "$stage/base" /
umoci insert --image "$layers" --history.created_by 'scripts/image-rootfs.sh app' "$stage/app" /app

configure() { # TAG [COMMAND...]
  local tag=$1
  shift
  local cmd=()
  if [ $# -gt 0 ]; then
    for c in "$@"; do cmd+=(--config.cmd "$c"); done
  else
    cmd=(--clear=config.cmd)
  fi
  umoci rm --image "$out:$tag" 2>/dev/null || true
  umoci config --image "$layers" --tag "$tag" \
    --os linux --architecture "$arch" \
    --config.user 65532:65532 --config.workingdir /app \
    --clear=config.env --config.env NODE_ENV=production --config.env PATH=/usr/local/bin \
    --clear=config.entrypoint --config.entrypoint /usr/local/bin/node --config.entrypoint /app/main.mjs \
    "${cmd[@]}" \
    --config.exposedports 8080/tcp \
    --config.label org.opencontainers.image.title=gatehouse \
    --config.label org.opencontainers.image.version="$version" \
    --config.label org.opencontainers.image.licenses=Apache-2.0
  echo "image: $out:$tag"
}
if [ "$target" != cli ]; then configure "$version" controller; fi
if [ "$target" != controller ]; then configure "$version-cli"; fi
umoci rm --image "$layers"
umoci gc --layout "$out"

# What a registry stores and a node pulls (the compressed layers and the JSON), and
# what the layers hold unpacked.
compressed=$(du -sb --apparent-size "$out/blobs" | cut -f1)
unpacked=$(du -sb --apparent-size "$stage/base" "$stage/app" | awk '{ s += $1 } END { print s }')
printf 'image: %s MB compressed, %s MB unpacked\n' "$((compressed / 1000000))" "$((unpacked / 1000000))"
