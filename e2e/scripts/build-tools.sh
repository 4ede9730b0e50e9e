#!/usr/bin/env bash
# Build the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl) from the Go modules pinned in e2e/tools/go.mod into $TURNA_TOOLS_DIR/bin
# (default: ${XDG_CACHE_HOME:-$HOME/.cache}/turna/tools/<k8s-version>/bin).
#
# Idempotent: a binary is rebuilt only when it is missing or e2e/tools/go.mod, go.sum or
# cmd/ changed since it was built (recorded in bin/.stamp). Prints timings.
#
#   e2e/scripts/build-tools.sh            # build what is missing
#   e2e/scripts/build-tools.sh --force    # rebuild all
#   e2e/scripts/build-tools.sh --print-dir
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TOOLS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)
pkg_of() {
	case "$1" in
	etcd) echo "github.com/turna/turna/e2e/tools/cmd/etcd" ;;
	*) echo "k8s.io/kubernetes/cmd/$1" ;;
	esac
}

force=0
for a in "$@"; do
	case "$a" in
	--force) force=1 ;;
	--print-dir) echo "$TOOLS_BIN"; exit 0 ;;
	-h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
	*) die "unknown argument: $a" ;;
	esac
done

mkdir -p "$TOOLS_BIN"
# One build at a time per tools dir (parallel test binaries may all call this script).
exec 9> "$TURNA_TOOLS_DIR/.lock"
flock 9
stamp_now="$(cat "$TOOLS_MOD_DIR/go.mod" "$TOOLS_MOD_DIR/go.sum" "$TOOLS_MOD_DIR"/cmd/*/*.go | sha256sum | cut -c1-16)"
stamp_file="$TOOLS_BIN/.stamp"
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" != "$stamp_now" ]]; then
	log "e2e/tools changed since the last build: rebuilding everything"
	force=1
fi

missing=()
for t in "${TOOLS[@]}"; do
	if [[ $force == 1 || ! -x "$TOOLS_BIN/$t" ]]; then missing+=("$t"); fi
done
if [[ ${#missing[@]} == 0 ]]; then
	log "tools for Kubernetes $K8S_VERSION up to date in $TOOLS_BIN"
	exit 0
fi

# Version stamps as Kubernetes' own build sets them (hack/lib/version.sh), so `kubectl version`
# and the apiserver's /version report the real release instead of v0.0.0-master.
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
	ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
ldflags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION"

pkgs=()
for t in "${missing[@]}"; do pkgs+=("$(pkg_of "$t")"); done

log "building ${missing[*]} (Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, $(go env GOVERSION)) into $TOOLS_BIN"
start=$(date +%s)
cd "$TOOLS_MOD_DIR"
t0=$(date +%s)
nice -n 15 go mod download
log "module download: $(($(date +%s) - t0))s"
# One `go build` for all: the packages share most of their dependencies, so they are compiled once.
tmp="$(mktemp -d "$TOOLS_BIN/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
log "go build: $(($(date +%s) - t0))s"
for t in "${missing[@]}"; do mv -f "$tmp/$t" "$TOOLS_BIN/$t"; done
echo "$stamp_now" > "$stamp_file"
echo "$K8S_VERSION" > "$TOOLS_BIN/.k8s-version"
log "done in $(($(date +%s) - start))s; $(du -sh "$TURNA_TOOLS_DIR" | cut -f1) in $TURNA_TOOLS_DIR; Go build cache $(du -sh "$(go env GOCACHE)" 2>/dev/null | cut -f1)"
