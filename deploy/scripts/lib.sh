# Shared settings of the deploy scripts. Source it; do not run it.
# shellcheck shell=bash disable=SC2034  # variables for the scripts that source this

# The e2e tools' toolchain and flags (e2e/scripts/lib.sh), so both share one Go build cache.
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../e2e/scripts/lib.sh"

DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPLOY_TOOLS_MOD="$DEPLOY_DIR/tools"
# Versions, read from deploy/tools/go.mod (no network, no go command needed).
HELM_VERSION="$(awk '$1=="helm.sh/helm/v3" && $2 ~ /^v/ {print $2; exit}' "$DEPLOY_TOOLS_MOD/go.mod")"
KUSTOMIZE_VERSION="$(awk '$1=="sigs.k8s.io/kustomize/kustomize/v5" && $2 ~ /^v/ {print $2; exit}' "$DEPLOY_TOOLS_MOD/go.mod")"
TURNA_DEPLOY_TOOLS_DIR="${TURNA_DEPLOY_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/tools/deploy-helm-$HELM_VERSION-kustomize-$KUSTOMIZE_VERSION}"
DEPLOY_TOOLS_BIN="$TURNA_DEPLOY_TOOLS_DIR/bin"
