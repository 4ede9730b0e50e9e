# Shared settings for the e2e scripts. Source it; do not run it.
# shellcheck shell=bash disable=SC2034  # variables for the scripts that source this
#
# The e2e Go modules (the conformance driver) need Go 1.27 (sigs.k8s.io/gateway-api v1.7.0);
# the tools module itself builds with Go 1.26, but one toolchain everywhere keeps the build
# cache shared. The machine's go env says GOTOOLCHAIN=local, so set it explicitly (the Go
# module proxy serves the toolchain); TURNA_GOTOOLCHAIN overrides.
export GOTOOLCHAIN="${TURNA_GOTOOLCHAIN:-go1.27.3}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_MOD_DIR="$E2E_DIR/tools"

# The Kubernetes version, read from e2e/tools/go.mod (no network, no go command needed).
K8S_VERSION="${K8S_VERSION:-$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$TOOLS_MOD_DIR/go.mod")}"
ETCD_VERSION="$(awk '{for (i = 1; i < NF; i++) if ($i == "go.etcd.io/etcd/server/v3") {print $(i+1); exit}}' "$TOOLS_MOD_DIR/go.mod")"
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.7.0}"

# Binaries live outside git, keyed by Kubernetes version, so every clone on this machine shares them.
TURNA_TOOLS_DIR="${TURNA_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/tools/$K8S_VERSION}"
TOOLS_BIN="$TURNA_TOOLS_DIR/bin"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
