#!/usr/bin/env bash
# Build the binaries that stand in for the container images the conformance suite deploys, from
# the Go modules pinned in e2e/images/go.mod, into $TURNA_IMAGES_DIR/<version>/<name>
# (default dir: ${XDG_CACHE_HOME:-$HOME/.cache}/turna/images), and point
# $TURNA_IMAGES_DIR/<name> at the current one. The node agent maps image repositories to these
# paths (e2e/cluster/images.yaml).
#
#   echo-basic  sigs.k8s.io/gateway-api-conformance-images/echo-basic (the suite's
#               registry.k8s.io/gateway-api/conformance/echo-basic image)
#   coredns     github.com/coredns/coredns with the plugins of e2e/images/cmd/coredns only
#               (registry.k8s.io/coredns/coredns; no forward plugin: it cannot query upstream)
#
# Idempotent: a binary is rebuilt only when it is missing or e2e/images/go.mod, go.sum or cmd/
# changed since it was built (recorded in <version>/.<name>.stamp).
#
#   e2e/scripts/build-images.sh             # build what is missing
#   e2e/scripts/build-images.sh --force     # rebuild
#   e2e/scripts/build-images.sh --print-dir # where the binaries are
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMAGES_MOD_DIR="$E2E_DIR/images"
TURNA_IMAGES_DIR="${TURNA_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/images}"

# name -> Go package and the module whose version names the image.
IMAGES=(echo-basic coredns)
pkg_of() {
	case "$1" in
	echo-basic) echo "sigs.k8s.io/gateway-api-conformance-images/echo-basic" ;;
	coredns) echo "github.com/turna/turna/e2e/images/cmd/coredns" ;;
	*) die "unknown image $1" ;;
	esac
}
module_of() {
	case "$1" in
	echo-basic) echo "sigs.k8s.io/gateway-api-conformance-images" ;;
	coredns) echo "github.com/coredns/coredns" ;;
	esac
}
version_of() {
	awk -v m="$(module_of "$1")" '{for (i = 1; i < NF; i++) if ($i == m && $(i+1) ~ /^v/) {print $(i+1); exit}}' \
		"$IMAGES_MOD_DIR/go.mod"
}

force=0
for a in "$@"; do
	case "$a" in
	--force) force=1 ;;
	--print-dir) echo "$TURNA_IMAGES_DIR"; exit 0 ;;
	-h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
	*) die "unknown argument: $a" ;;
	esac
done

mkdir -p "$TURNA_IMAGES_DIR"
exec 9> "$TURNA_IMAGES_DIR/.lock"
flock 9
stamp_now="$(cat "$IMAGES_MOD_DIR/go.mod" "$IMAGES_MOD_DIR/go.sum" "$IMAGES_MOD_DIR"/cmd/*/*.go | sha256sum | cut -c1-16)"

cd "$IMAGES_MOD_DIR"
for name in "${IMAGES[@]}"; do
	version="$(version_of "$name")"
	[[ -n $version ]] || die "no version of $(module_of "$name") in e2e/images/go.mod"
	dir="$TURNA_IMAGES_DIR/$version"
	stamp="$dir/.$name.stamp"
	if [[ $force == 0 && -x "$dir/$name" && -f "$stamp" && "$(cat "$stamp")" == "$stamp_now" ]]; then
		log "$name $version up to date in $dir"
	else
		mkdir -p "$dir"
		log "building $name $version ($(go env GOVERSION)) into $dir"
		t0=$(date +%s)
		tmp="$(mktemp -d "$dir/.build.XXXXXX")"
		CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "-s -w" -o "$tmp/$name" "$(pkg_of "$name")"
		mv -f "$tmp/$name" "$dir/$name"
		rmdir "$tmp"
		echo "$stamp_now" > "$stamp"
		log "$name built in $(($(date +%s) - t0))s"
	fi
	ln -sfn "$version/$name" "$TURNA_IMAGES_DIR/$name"
done
