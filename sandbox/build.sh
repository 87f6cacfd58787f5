#!/usr/bin/env bash
# Builds the sandbox's control plane from Go modules: kube-apiserver,
# kube-controller-manager and kube-scheduler (k8s.io/kubernetes), etcd 3.6 and kwok;
# helm, Prometheus and Alertmanager, which tests use; and the scale benchmark's Go baseline.
#
# No release binaries can be downloaded here, but the Go module proxy serves the
# sources, so each program is built in a scratch module under the cache. Binaries
# land in $GATEHOUSE_CACHE/<kubernetes version>/bin and the chosen version is
# written to $GATEHOUSE_CACHE/current; a finished build is never redone.
#
# Usage: sandbox/build.sh [--print-dir]
set -euo pipefail

CACHE=${GATEHOUSE_CACHE:-$HOME/.cache/gatehouse}
MINORS=${GATEHOUSE_K8S_MINORS:-"36 35 34"}
ETCD_MINOR=${GATEHOUSE_ETCD_MINOR:-3.6}
KWOK_VERSION=${GATEHOUSE_KWOK_VERSION:-}
# The module cache lives under the cache directory too (Go's default is ~/go/pkg/mod),
# so everything a build downloads is in one place and a clean checkout stays clean.
export GOMODCACHE=${GATEHOUSE_GOMODCACHE:-$CACHE/go-mod}
export GOFLAGS=${GOFLAGS:--buildvcs=false}
export CGO_ENABLED=0
# A build interrupted half-way must never be mistaken for a finished one: every
# binary is written under a temporary name and renamed once complete.

log() { printf '[sandbox build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v go >/dev/null || die "Go is required (https://go.dev); none on PATH"
mkdir -p "$CACHE"
# One build at a time: a second one (a test run starting while CI's build still runs)
# waits, then finds the work done, instead of deleting the first one's scratch modules.
exec 9>"$CACHE/.build.lock"
flock 9

# Releases the proxy serves for a module whose version starts with PREFIX (e.g. v1.36),
# newest first. Never fails: no match is an empty list.
versions() {
  local module=$1 prefix=$2
  (cd "$CACHE" && GOFLAGS=-mod=mod go list -m -versions -json "$module@latest" 2>/dev/null || true) \
    | tr -d ' \n' | grep -o '"Versions":\[[^]]*\]' | grep -o '"v[^"]*"' | tr -d '"' \
    | grep -E "^${prefix//./\\.}(\\.[0-9]+)+$" | sort -V -r || true
}

# scratch_module DIR NAME: a fresh go.mod in DIR.
scratch_module() {
  rm -rf "$1" && mkdir -p "$1"
  (cd "$1" && go mod init "$2" >/dev/null 2>&1)
}

build_kubernetes() {
  local version=$1 out=$2
  local minor=${version#v1.}; minor=${minor%%.*}
  local staging=v0.${version#v1.}
  local work=$CACHE/work/kubernetes-$version
  log "kubernetes $version: preparing scratch module in $work"
  scratch_module "$work" gatehouse.local/sandbox/kubernetes
  cd "$work"
  go mod edit -require="k8s.io/kubernetes@$version"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
  # ./staging paths, which only work inside its own repository. Map each to its
  # published v0.X.Y release instead.
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  [ -f "$gomod" ] || { log "kubernetes $version: go.mod not found"; return 1; }
  local mods
  mods=$(grep -oE '^[[:space:]]+k8s\.io/[a-z0-9./-]+ v0\.0\.0$' "$gomod" | awk '{print $1}' | sort -u)
  [ -n "$mods" ] || { log "kubernetes $version: no staging modules found in go.mod"; return 1; }
  local m
  for m in $mods; do go mod edit -replace="$m=$m@$staging"; done
  log "kubernetes $version: replaced $(echo "$mods" | wc -l) staging modules with $staging; resolving dependencies"
  local pkgs="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler"
  # Without an explicit version `go get` would upgrade k8s.io/kubernetes itself.
  # shellcheck disable=SC2086
  go get $(printf "%s@$version " $pkgs) >"$work/get.log" 2>&1 || { tail -20 "$work/get.log" >&2; return 1; }
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ldflags="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  mkdir -p "$out"
  for pkg in $pkgs; do
    local name=${pkg##*/}
    log "kubernetes $version: building $name (a cold build takes several minutes)"
    go build -trimpath -ldflags "$ldflags" -o "$out/.$name.tmp" "$pkg" >"$work/build-$name.log" 2>&1 \
      || { tail -20 "$work/build-$name.log" >&2; return 1; }
    mv "$out/.$name.tmp" "$out/$name"
  done
}

build_etcd() {
  local out=$1 version
  for version in $(versions go.etcd.io/etcd/server/v3 "v$ETCD_MINOR"); do
    local work=$CACHE/work/etcd-$version
    log "etcd $version: building"
    scratch_module "$work" gatehouse.local/sandbox/etcd
    if (cd "$work" && go get "go.etcd.io/etcd/server/v3@$version" >get.log 2>&1 \
        && go build -trimpath -ldflags "-s -w" -o "$out/.etcd.tmp" go.etcd.io/etcd/server/v3 >build.log 2>&1); then
      mv "$out/.etcd.tmp" "$out/etcd"
      echo "$version" >"$out/etcd.version"
      return 0
    fi
    tail -5 "$work"/*.log >&2 || true
    log "etcd $version: failed"
  done
  # Debian packages etcd too; older, but it speaks the same v3 API.
  log "etcd: building from modules failed; trying Debian's etcd-server"
  if ! command -v etcd >/dev/null; then
    (apt-get install -y etcd-server >/dev/null 2>&1 || (apt-get update >/dev/null && apt-get install -y etcd-server >/dev/null)) \
      || die "etcd: neither a module build nor Debian's etcd-server worked"
  fi
  ln -sf "$(command -v etcd)" "$out/etcd"
  etcd --version | head -1 >"$out/etcd.version"
}

build_kwok() {
  local out=$1 version
  local candidates=$KWOK_VERSION
  [ -n "$candidates" ] || candidates=$(versions sigs.k8s.io/kwok v0 | head -3)
  for version in $candidates; do
    local work=$CACHE/work/kwok-$version
    log "kwok $version: building"
    scratch_module "$work" gatehouse.local/sandbox/kwok
    if (cd "$work" && go get "sigs.k8s.io/kwok/cmd/kwok@$version" >get.log 2>&1 \
        && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$version" \
             -o "$out/.kwok.tmp" sigs.k8s.io/kwok/cmd/kwok >build.log 2>&1); then
      mv "$out/.kwok.tmp" "$out/kwok"
      echo "$version" >"$out/kwok.version"
      return 0
    fi
    tail -5 "$work"/*.log >&2 || true
    log "kwok $version: failed"
  done
  die "kwok: no version built (tried: $candidates)"
}

# Helm, for linting and rendering the chart in tests; built like the rest, cached apart
# from the Kubernetes version.
HELM_VERSION=${GATEHOUSE_HELM_VERSION:-v4.3.2}
build_helm() {
  local dir=$CACHE/tools/helm-$HELM_VERSION
  # tools/helm always points at the version this script wants (sandbox/binaries.ts reads it).
  if [ -x "$dir/helm" ]; then ln -sfn "$dir/helm" "$CACHE/tools/helm"; return 0; fi
  log "helm $HELM_VERSION: building"
  mkdir -p "$dir"
  GOBIN=$dir go install -trimpath -ldflags "-s -w" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >"$CACHE/helm-build.log" 2>&1 \
    || { tail -20 "$CACHE/helm-build.log" >&2; die "helm $HELM_VERSION did not build"; }
  ln -sfn "$dir/helm" "$CACHE/tools/helm"
  log "helm $HELM_VERSION: done"
}

# Prometheus, promtool and Alertmanager, for the `prometheus` probe's and the silence
# leases' tests and for loading the chart's alert rules; pinned like helm and cached
# apart from the Kubernetes version. Prometheus is built with `remove_all_sd`: the
# sandbox scrapes static targets only, and dropping the cloud service-discovery plugins
# (AWS, Azure, GCE, Kubernetes...) roughly halves what has to be compiled on a cold CI
# machine. `-s -w` drops the symbol tables nobody debugs here.
PROMETHEUS_VERSION=${GATEHOUSE_PROMETHEUS_VERSION:-v0.316.0}
ALERTMANAGER_VERSION=${GATEHOUSE_ALERTMANAGER_VERSION:-v0.35.0}
# build_go_tool NAME MODULE VERSION TAGS VERSIONFLAGS PREPARE PKG...: builds PKGs of
# MODULE@VERSION into tools/NAME-VERSION and points tools/<program> at each. PREPARE, if
# not empty, is a function run in the scratch module once its requirements are in.
build_go_tool() {
  local name=$1 module=$2 version=$3 tags=$4 vflags=$5 prepare=$6; shift 6
  local dir=$CACHE/tools/$name-$version pkg all=1
  for pkg in "$@"; do [ -x "$dir/${pkg##*/}" ] || all=; done
  if [ -z "$all" ]; then
    local work=$CACHE/work/$name-$version began
    began=$(date +%s)
    log "$name $version: building ${*##*/} (a cold build takes several minutes)"
    scratch_module "$work" "gatehouse.local/sandbox/$name"
    mkdir -p "$dir"
    # shellcheck disable=SC2046
    (cd "$work" && go get $(printf "%s@$version " "$@") >get.log 2>&1) \
      || { tail -20 "$work/get.log" >&2; die "$name $version: go get failed"; }
    [ -z "$prepare" ] || (cd "$work" && "$prepare" "$module" "$version") \
      || die "$name $version: preparing the build failed"
    for pkg in "$@"; do
      local bin=${pkg##*/}
      [ -x "$dir/$bin" ] && continue
      (cd "$work" && go build -trimpath -tags "$tags" -ldflags "-s -w $vflags" -o "$dir/.$bin.tmp" "$pkg" >"build-$bin.log" 2>&1) \
        || { tail -20 "$work/build-$bin.log" >&2; die "$name $version: $bin did not build"; }
      mv "$dir/.$bin.tmp" "$dir/$bin"
    done
    printf '{"seconds": %d, "go": "%s"}\n' "$(($(date +%s) - began))" "$(go env GOVERSION)" >"$dir/build.json"
    rm -rf "$work"
    log "$name $version: done in $(($(date +%s) - began)) s"
  fi
  for pkg in "$@"; do ln -sfn "$dir/${pkg##*/}" "$CACHE/tools/${pkg##*/}"; done
}
# Alertmanager embeds its web UI from ui/app/dist, which is built with npm and not part of
# the module's source. The sandbox uses its API only: build from a copy of the module with
# a one-page stand-in for the UI.
alertmanager_without_ui() {
  local module=$1 version=$2 src
  src=$(go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
  [ -d "$src" ] || return 1
  cp -r "$src" alertmanager-src && chmod -R u+w alertmanager-src
  local d
  for d in elm mantine; do
    mkdir -p "alertmanager-src/ui/app/dist/$d"
    echo '<!doctype html><title>Alertmanager</title><p>Built without its web UI; the API is at /api/v2/.' \
      >"alertmanager-src/ui/app/dist/$d/index.html"
  done
  go mod edit -replace="$module=./alertmanager-src"
}
build_monitoring() {
  # Prometheus 3.x is published as module v0.3XX.Y; its own version is 3.XX.Y.
  local pv=${PROMETHEUS_VERSION#v0.}
  pv=3.$((10#${pv%%.*} - 300)).${pv#*.}
  local common=github.com/prometheus/common/version
  build_go_tool prometheus github.com/prometheus/prometheus "$PROMETHEUS_VERSION" remove_all_sd \
    "-X $common.Version=$pv -X $common.Branch=release -X $common.Revision=module" "" \
    github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
  build_go_tool alertmanager github.com/prometheus/alertmanager "$ALERTMANAGER_VERSION" "" \
    "-X $common.Version=${ALERTMANAGER_VERSION#v} -X $common.Branch=release -X $common.Revision=module" \
    alertmanager_without_ui \
    github.com/prometheus/alertmanager/cmd/alertmanager
}

# The scale benchmark's Go baseline (bench/baseline-go: a controller-runtime manager that
# the benchmark runs beside gatehouse; never shipped, see its README). Kept under tools/ by
# a digest of its sources, so it is built again only when they change; bench/baseline-go.ts
# computes the same digest. Built here, with everything else the repository needs, so
# that CI notices when it stops building: a cold build takes 2-3 minutes.
BASELINE_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../bench/baseline-go" && pwd)
build_baseline() {
  local digest dir began
  digest=$(cd "$BASELINE_SRC" && cat go.mod go.sum main.go | sha256sum | cut -c1-16)
  dir=$CACHE/tools/baseline-go-$digest
  if [ ! -x "$dir/baseline-go" ]; then
    began=$(date +%s)
    log "bench baseline (controller-runtime) $digest: building (a cold build takes a few minutes)"
    mkdir -p "$dir"
    (cd "$BASELINE_SRC" && go build -trimpath -ldflags "-s -w" -o "$dir/.baseline-go.tmp" .) \
      >"$CACHE/baseline-go-build.log" 2>&1 \
      || { tail -20 "$CACHE/baseline-go-build.log" >&2; die "the bench baseline did not build"; }
    mv "$dir/.baseline-go.tmp" "$dir/baseline-go"
    # Builds of earlier sources are of no more use.
    find "$CACHE/tools" -maxdepth 1 -name 'baseline-go-*' ! -name "baseline-go-$digest" -exec rm -rf {} +
    log "bench baseline: done in $(($(date +%s) - began)) s"
  fi
}

complete() {
  local bin=$1/bin f
  for f in kube-apiserver kube-controller-manager kube-scheduler etcd kwok; do
    [ -x "$bin/$f" ] || return 1
  done
}

build_helm
build_monitoring
build_baseline

# Reuse the newest complete build already in the cache.
if [ -f "$CACHE/current" ] && complete "$CACHE/$(cat "$CACHE/current")"; then
  dir=$CACHE/$(cat "$CACHE/current")
  log "up to date: $dir/bin"
  [ "${1:-}" = --print-dir ] && echo "$dir"
  exit 0
fi

began=$(date +%s)
chosen=
tried=()
for minor in $MINORS; do
  for version in $(versions k8s.io/kubernetes "v1.$minor" | head -2); do
    dir=$CACHE/$version
    if complete "$dir"; then chosen=$version; break 2; fi
    if [ -x "$dir/bin/kube-scheduler" ] || build_kubernetes "$version" "$dir/bin"; then
      chosen=$version; break 2
    fi
    tried+=("$version")
    log "kubernetes $version did not build; trying an older release"
  done
done
[ -n "$chosen" ] || die "no Kubernetes release built (tried: ${tried[*]:-none served for minors $MINORS})"

dir=$CACHE/$chosen
[ -x "$dir/bin/etcd" ] || build_etcd "$dir/bin"
[ -x "$dir/bin/kwok" ] || build_kwok "$dir/bin"
echo "$chosen" >"$dir/bin/kubernetes.version"
# Kept for the benchmarks, which report the cold (build) time beside the start times.
printf '{"seconds": %d, "finished": "%s", "go": "%s"}\n' "$(($(date +%s) - began))" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go env GOVERSION)" >"$dir/bin/build.json"
echo "$chosen" >"$CACHE/current"
rm -rf "$CACHE/work"
log "done: $dir/bin (kubernetes $chosen, etcd $(cat "$dir/bin/etcd.version"), kwok $(cat "$dir/bin/kwok.version"))"
[ "${1:-}" = --print-dir ] && echo "$dir"
exit 0
