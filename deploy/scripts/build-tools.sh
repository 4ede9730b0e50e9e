#!/usr/bin/env bash
# Build helm and kustomize from the Go modules pinned in deploy/tools/go.mod into
# $TURNA_DEPLOY_TOOLS_DIR/bin (default: ${XDG_CACHE_HOME:-$HOME/.cache}/turna/tools/
# deploy-helm-<version>-kustomize-<version>/bin), for `make deploy-check`.
#
# Idempotent: the binaries are rebuilt only when missing or when deploy/tools/go.mod or go.sum
# or this script changed since they were built (bin/.stamp). Uses the e2e tools' Go toolchain and flags, so
# the Kubernetes packages both pin (k8s.io/* v0.37.2) come out of one Go build cache.
#
#   deploy/scripts/build-tools.sh              # build what is missing
#   deploy/scripts/build-tools.sh --force      # rebuild both
#   deploy/scripts/build-tools.sh --print-dir  # the bin directory
set -euo pipefail
# shellcheck source=deploy/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

force=0
for a in "$@"; do
	case "$a" in
	--force) force=1 ;;
	--print-dir) echo "$DEPLOY_TOOLS_BIN"; exit 0 ;;
	-h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
	*) die "unknown argument: $a" ;;
	esac
done

mkdir -p "$DEPLOY_TOOLS_BIN"
# One build at a time (parallel callers wait for the first).
exec 9> "$TURNA_DEPLOY_TOOLS_DIR/.lock"
flock 9
stamp_now="$(cat "$DEPLOY_TOOLS_MOD/go.mod" "$DEPLOY_TOOLS_MOD/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
stamp_file="$DEPLOY_TOOLS_BIN/.stamp"
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" != "$stamp_now" ]]; then
	log "deploy/tools changed since the last build: rebuilding"
	force=1
fi
if [[ $force == 0 && -x "$DEPLOY_TOOLS_BIN/helm" && -x "$DEPLOY_TOOLS_BIN/kustomize" ]]; then
	log "helm $HELM_VERSION and kustomize $KUSTOMIZE_VERSION up to date in $DEPLOY_TOOLS_BIN"
	exit 0
fi

# Version stamps as their release builds set them, so `helm version` and `kustomize version`
# report the real release, and helm's default Kubernetes version (lint, template's
# .Capabilities) is the one of its client-go (v0.37 => 1.37), as helm's own Makefile does.
client_go="$(awk '$1=="k8s.io/client-go" && $2 ~ /^v/ {print $2; exit}' "$DEPLOY_TOOLS_MOD/go.mod")"
k8s_minor="$(echo "$client_go" | cut -d. -f2)"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
	ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$k8s_minor"
done
ldflags+=" -X sigs.k8s.io/kustomize/api/provenance.version=kustomize/$KUSTOMIZE_VERSION"
ldflags+=" -X sigs.k8s.io/kustomize/api/provenance.buildDate=1970-01-01T00:00:00Z"

log "building helm $HELM_VERSION and kustomize $KUSTOMIZE_VERSION ($(go env GOVERSION)) into $DEPLOY_TOOLS_BIN"
start=$(date +%s)
cd "$DEPLOY_TOOLS_MOD"
nice -n 15 go mod download
tmp="$(mktemp -d "$DEPLOY_TOOLS_BIN/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
	helm.sh/helm/v3/cmd/helm sigs.k8s.io/kustomize/kustomize/v5
mv -f "$tmp/helm" "$DEPLOY_TOOLS_BIN/helm"
mv -f "$tmp/v5" "$DEPLOY_TOOLS_BIN/kustomize" 2>/dev/null || mv -f "$tmp/kustomize" "$DEPLOY_TOOLS_BIN/kustomize"
echo "$stamp_now" > "$stamp_file"
log "done in $(($(date +%s) - start))s"
