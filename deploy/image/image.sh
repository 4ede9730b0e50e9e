#!/usr/bin/env bash
# Turna's image with Docker: build it, and test it (`make image`, `make image-test`).
#
#   deploy/image/image.sh build [--local|--registry] [--tag IMAGE] [--binary FILE]
#   deploy/image/image.sh base [--force]   # turna.local/base:debian12 from Debian packages
#   deploy/image/image.sh test             # part of `make test`; says it skipped without Docker
#
# build: with --registry (or, by default, when the registry bases are present or can be
# pulled) the published image: ./Dockerfile as it is, turna built profile-guided inside Docker
# on rust:<version>-bookworm, on gcr.io/distroless/cc-debian12:nonroot. With --local (or when
# they cannot be pulled, as on a machine that reaches no container registry) the same
# Dockerfile with BASE=turna.local/base:debian12 (`base`, below) and TURNA_FROM=host: the turna
# binary is built on the host (cargo build --release --locked, or --binary FILE; `make
# release-pgo` prints the path of the profile-guided one) and is the only file of the build
# context. Either way the image is tagged IMAGE (default ghcr.io/rakunlabs/turna:<crate
# version>, what the chart and the Kustomize base run).
#
# base: a root filesystem unpacked from the Debian 12 packages libc6, libgcc-s1,
# ca-certificates (the bundle concatenated from its certificates, as update-ca-certificates
# would), netbase and tzdata (apt-get download, cached in ~/.cache/turna/images/base-debian12),
# with distroless's users (root 0, nonroot 65532, nobody 65534), /tmp and /home/nonroot;
# imported as turna.local/base:debian12. Rebuilt when the package versions or this script
# change. Needs a Debian 12 host (the binary copied in links its glibc).
#
# test: builds turna.local/turna:test from target/debug/turna (what `make test` has built) on
# the local base, then checks with real containers:
#   1. `turna --version` in the image prints the workspace version;
#   2. the image runs as 65532:65532 (its configuration, and the uid the kernel reports for
#      the running process);
#   3. `turna local` on examples/local mounted read-only, in a container with a read-only root
#      filesystem, every capability dropped and no-new-privileges, serves /one/ and /two/
#      through a port published on 127.0.0.1 (the examples' backends, Python's http.server,
#      run in the container's network namespace at the 127.0.0.1:9081/9082 the files name).
# Without a Docker engine (no docker command, or no daemon answering) or without root (the
# backends enter the container's network namespace) it prints that it skipped and why, and
# counts the test as skipped; it never passes silently.
#
# Docker: BuildKit is needed (DOCKER_BUILDKIT=1 with a client that has it built in, as
# Debian's docker.io, or buildx). TURNA_DOCKER names the client; default: `docker` if it has
# buildx or is older than 23, else /usr/bin/docker (Debian's) when present.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"

VERSION="$(awk '/^\[workspace.package\]/ {p = 1; next} /^\[/ {p = 0} p && $1 == "version" {gsub(/"/, "", $3); print $3; exit}' "$ROOT/Cargo.toml")"
LOCAL_BASE="turna.local/base:debian12"
REGISTRY_BASE="gcr.io/distroless/cc-debian12:nonroot"
RUST_IMAGE="docker.io/library/rust:$(awk -F= '/^ARG RUST_VERSION=/ {print $2; exit}' "$ROOT/Dockerfile")-bookworm"
BASE_PACKAGES=(libc6 libgcc-s1 ca-certificates netbase tzdata)
IMAGES_CACHE="${TURNA_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/images}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"

# The Docker client to build with (BuildKit: the Dockerfile's stages are chosen by build
# arguments, and only BuildKit skips the stages a build does not need).
docker_client() {
	if [[ -n ${TURNA_DOCKER:-} ]]; then echo "$TURNA_DOCKER"; return; fi
	local major
	if docker buildx version > /dev/null 2>&1; then echo docker; return; fi
	major="$(docker version --format '{{.Client.Version}}' 2> /dev/null | cut -d. -f1)" || true
	if [[ $major =~ ^[0-9]+$ && $major -lt 23 ]]; then echo docker; return; fi
	if [[ -x /usr/bin/docker ]]; then echo /usr/bin/docker; return; fi
	echo docker
}

docker_build() { DOCKER_BUILDKIT=1 "$(docker_client)" build "$@"; }

# docker_ready: a Docker engine answers (prints why not on stderr).
docker_ready() {
	command -v docker > /dev/null || { echo "no docker command" >&2; return 1; }
	local err
	err="$(docker info --format '{{.ServerVersion}}' 2>&1 > /dev/null)" || {
		echo "no Docker engine answers (docker info: ${err%%$'\n'*})" >&2
		return 1
	}
}

# ---- base: turna.local/base:debian12 from Debian packages ----
base() {
	local force=0
	[[ ${1:-} == --force ]] && force=1
	[[ -r /etc/debian_version && "$(cut -d. -f1 /etc/debian_version)" == 12 ]] ||
		die "the local base is made of this host's Debian 12 packages; this host is not Debian 12"
	local dir="$IMAGES_CACHE/base-debian12" versions key p
	mkdir -p "$dir/debs"
	# The versions apt would install; apt-get update first when the lists are missing.
	versions="$(apt-cache policy "${BASE_PACKAGES[@]}" 2> /dev/null | awk '/^[^ ]/ {p = $1; sub(/:$/, "", p)} /Candidate:/ {print p, $2}')"
	if grep -q '(none)' <<< "$versions" || [[ $(wc -l <<< "$versions") -ne ${#BASE_PACKAGES[@]} ]]; then
		log "apt-get update (no package lists)"
		apt-get update -qq
		versions="$(apt-cache policy "${BASE_PACKAGES[@]}" | awk '/^[^ ]/ {p = $1; sub(/:$/, "", p)} /Candidate:/ {print p, $2}')"
	fi
	key="$( (echo "$versions"; cat "${BASH_SOURCE[0]}") | sha256sum | cut -c1-16)"
	if [[ $force == 0 ]] && [[ "$(docker image inspect -f '{{index .Config.Labels "turna.base.key"}}' "$LOCAL_BASE" 2> /dev/null)" == "$key" ]]; then
		log "$LOCAL_BASE is up to date"
		return
	fi
	log "building $LOCAL_BASE from Debian packages: $(tr '\n' ' ' <<< "$versions")"
	# (As root into a folder _apt cannot read: apt says it downloads unsandboxed, which is fine.)
	(cd "$dir/debs" && rm -f ./*.deb && apt-get download -qq "${BASE_PACKAGES[@]}" 2> "$dir/download.log") ||
		die "apt-get download ${BASE_PACKAGES[*]} failed: $(cat "$dir/download.log")"
	local rootfs="$dir/rootfs"
	rm -rf "$rootfs" && mkdir -p "$rootfs"
	for p in "$dir"/debs/*.deb; do dpkg-deb -x "$p" "$rootfs"; done
	# What maintainer scripts would have made: the CA bundle, the linker cache.
	mkdir -p "$rootfs/etc/ssl/certs"
	find "$rootfs/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | xargs cat > "$rootfs/etc/ssl/certs/ca-certificates.crt"
	ldconfig -r "$rootfs" 2> /dev/null || true
	# distroless's accounts and folders.
	cat > "$rootfs/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/sbin/nologin
		nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
		nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
	EOF
	cat > "$rootfs/etc/group" <<-'EOF'
		root:x:0:
		nobody:x:65534:
		tty:x:5:
		staff:x:50:
		nonroot:x:65532:
	EOF
	mkdir -p "$rootfs/tmp" "$rootfs/root" "$rootfs/home/nonroot"
	chmod 1777 "$rootfs/tmp"; chmod 700 "$rootfs/root" "$rootfs/home/nonroot"
	chown 65532:65532 "$rootfs/home/nonroot"
	# Documentation and the packages' own scripts are not part of an image.
	rm -rf "$rootfs/usr/share/doc" "$rootfs/usr/share/man" "$rootfs/usr/share/lintian" "$rootfs/usr/sbin/update-ca-certificates"
	local old
	old="$(docker image inspect -f '{{.Id}}' "$LOCAL_BASE" 2> /dev/null)" || true
	tar --numeric-owner -C "$rootfs" -c . |
		docker import --change "LABEL turna.base.key=$key" \
			--change "LABEL turna.base.packages=\"$(tr '\n' ',' <<< "$versions" | sed 's/,$//')\"" \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
			- "$LOCAL_BASE" > /dev/null
	rm -rf "$rootfs"
	# The previous base, if unused now (images built on it keep it).
	[[ -z $old ]] || docker rmi "$old" > /dev/null 2>&1 || true
	log "$LOCAL_BASE: $(docker image inspect -f '{{.Size}}' "$LOCAL_BASE" | awk '{printf "%.1f MB", $1 / 1e6}')"
}

# build_local BINARY TAG [EXTRA DOCKER BUILD ARGS]: the Dockerfile on the local base with BINARY.
build_local() {
	local binary="$1" tag="$2" ctx; shift 2
	[[ -x $binary ]] || die "no turna binary at $binary"
	base
	ctx="$(mktemp -d "${TMPDIR:-/tmp}/turna-image.XXXXXX")"
	# A hard link when it can (no copy of a large debug binary), else a copy.
	ln "$binary" "$ctx/turna" 2> /dev/null || cp "$binary" "$ctx/turna"
	local rc=0 old
	old="$(docker image inspect -f '{{.Id}}' "$tag" 2> /dev/null)" || true
	docker_build -q -f "$ROOT/Dockerfile" --build-arg BASE="$LOCAL_BASE" --build-arg TURNA_FROM=host \
		-t "$tag" "$@" "$ctx" > /dev/null || rc=$?
	rm -rf "$ctx"
	[[ $rc == 0 ]] || die "docker build of $tag failed"
	# The image this tag named before, unless something still uses it.
	if [[ -n $old && "$(docker image inspect -f '{{.Id}}' "$tag")" != "$old" ]]; then
		docker rmi "$old" > /dev/null 2>&1 || true
	fi
	log "built $tag ($LOCAL_BASE, $binary)"
}

pullable() { docker image inspect "$1" > /dev/null 2>&1 || docker pull -q "$1" > /dev/null 2>&1; }

build() {
	local mode=auto tag="ghcr.io/rakunlabs/turna:$VERSION" binary=""
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--local) mode=local; shift ;;
		--registry) mode=registry; shift ;;
		--tag) tag="${2:?}"; shift 2 ;;
		--binary) binary="${2:?}"; mode=local; shift 2 ;;
		*) die "unknown argument $1" ;;
		esac
	done
	docker_ready || die "make image needs a Docker engine"
	if [[ $mode == auto ]]; then
		if pullable "$REGISTRY_BASE" && pullable "$RUST_IMAGE"; then mode=registry; else
			log "$REGISTRY_BASE or $RUST_IMAGE cannot be pulled: the local base and a host build"
			mode=local
		fi
	fi
	if [[ $mode == registry ]]; then
		docker_build -t "$tag" "$ROOT"
		log "built $tag (published form: $REGISTRY_BASE, profile-guided build in Docker)"
		return
	fi
	if [[ -z $binary ]]; then
		log "cargo build --release --locked -p turna-operator --bin turna"
		(cd "$ROOT" && cargo build --release --locked -p turna-operator --bin turna)
		binary="$TARGET/release/turna"
	fi
	build_local "$binary" "$tag"
}

# ---- test ----
passed=0 failed=0
check() { # check NAME COMMAND...: runs COMMAND, counts and prints the result.
	local name="$1"; shift
	if "$@"; then passed=$((passed + 1)); echo "image-test: ok   $name"; else
		failed=$((failed + 1)); echo "image-test: FAIL $name"
	fi
}

skip() {
	echo "image-test: SKIPPED, $*"
	echo "image-test: 0 passed, 0 failed, 1 skipped"
	exit 0
}

# What the test started, removed on exit.
work="" container="" pids=()
cleanup() {
	[[ -z $container ]] || docker rm -f "$container" > /dev/null 2>&1 || true
	local p
	for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
	wait 2> /dev/null || true
	[[ -z $work ]] || rm -rf "$work"
	# The test image: rebuilt each run in seconds, so not kept (each would stay behind as a
	# dangling image of the binary's size).
	[[ -z $work ]] || docker rmi turna.local/turna:test > /dev/null 2>&1 || true
}

test_image() {
	local why
	why="$(docker_ready 2>&1)" || skip "$why"
	[[ "$(id -u)" == 0 ]] || skip "needs root (the examples' backends run in the container's network namespace)"
	command -v nsenter > /dev/null || skip "needs nsenter (util-linux)"
	local binary="$TARGET/debug/turna" tag=turna.local/turna:test
	if [[ ! -x $binary ]]; then
		log "building $binary"
		(cd "$ROOT" && cargo build -q -p turna-operator --bin turna)
	fi
	build_local "$binary" "$tag"

	work="$(mktemp -d "${TMPDIR:-/tmp}/turna-image-test.XXXXXX")"
	trap cleanup EXIT

	# 1. The version.
	local out
	# Standard output only: Docker's own warnings (e.g. "IPv4 forwarding is disabled" on a
	# machine with net.ipv4.ip_forward=0) go to standard error, which stays in the log.
	out="$(docker run --rm --read-only --cap-drop ALL "$tag" --version)" || true
	check "turna --version in the image: '$out', workspace $VERSION" test "$out" = "turna $VERSION"

	# 3. turna local on the mounted examples, published on 127.0.0.1.
	container="$(docker run -d --read-only --cap-drop ALL --security-opt no-new-privileges \
		-v "$ROOT/examples/local:/etc/turna/examples:ro" -p 127.0.0.1::8080 \
		-e RUST_LOG=info "$tag" local -f /etc/turna/examples --address 0.0.0.0)"
	local pid port
	pid="$(docker inspect -f '{{.State.Pid}}' "$container")"
	port="$(docker port "$container" 8080/tcp | awk -F: 'NR == 1 {print $NF}')"
	[[ $pid =~ ^[1-9][0-9]*$ && -n $port ]] || { docker logs "$container" >&2 || true; die "the container did not start"; }
	local name
	for name in one two; do
		mkdir -p "$work/$name/$name"
		echo "hello from backend $name" > "$work/$name/$name/index.html"
	done
	nsenter --net="/proc/$pid/ns/net" python3 -m http.server 9081 --bind 127.0.0.1 --directory "$work/one" > "$work/one.log" 2>&1 &
	pids+=($!)
	nsenter --net="/proc/$pid/ns/net" python3 -m http.server 9082 --bind 127.0.0.1 --directory "$work/two" > "$work/two.log" 2>&1 &
	pids+=($!)

	# 2. Non-root: the image's user, and the running process's uids as the kernel has them.
	local user uids
	user="$(docker image inspect -f '{{.Config.User}}' "$tag")"
	uids="$(awk '/^Uid:|^Gid:/ {printf "%s%s", sep, $2 ":" $3 ":" $4 ":" $5; sep = " "}' "/proc/$pid/status")"
	check "runs as non-root: image user '$user', process uid/gid (real:effective:saved:fs) $uids" \
		test "$user" = 65532:65532 -a "$uids" = "65532:65532:65532:65532 65532:65532:65532:65532"
	local ro
	ro="$(docker inspect -f '{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}}' "$container")"
	check "read-only root filesystem, every capability dropped: $ro" test "$ro" = "true [ALL]"

	local ok body path
	for path in one two; do
		ok=false
		for _ in $(seq 1 100); do
			body="$(curl -fsS --max-time 2 "http://127.0.0.1:$port/$path/" 2> /dev/null)" || true
			[[ $body == "hello from backend $path" ]] && { ok=true; break; }
			sleep 0.1
		done
		check "GET http://127.0.0.1:$port/$path/ through the container: '${body:-no answer}'" $ok
	done
	if [[ $failed != 0 ]]; then
		echo "image-test: the container's log:" >&2
		docker logs "$container" 2>&1 | tail -30 >&2
	fi
	echo "image-test: $passed passed, $failed failed"
	[[ $failed == 0 ]]
}

cmd="${1:-}"; [[ $# -gt 0 ]] && shift
case "$cmd" in
build) build "$@" ;;
base) base "$@" ;;
test) test_image ;;
-h|--help|"") awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" ;;
*) die "unknown command $cmd (build, base, test)" ;;
esac
