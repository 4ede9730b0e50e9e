#!/usr/bin/env bash
# kind and a kind node image, built on this machine from Go modules and Debian packages (no
# container registry is reachable: every image is made here). See deploy/kind/README.md.
#
#   deploy/kind/build.sh [node]     # everything below that is missing or changed (cached)
#   deploy/kind/build.sh bins       # kind, kubelet/kubeadm/kube-proxy/CoreDNS, containerd, runc,
#                                   # crictl, CNI plugins, pause into $KIND_CACHE/bin
#   deploy/kind/build.sh images     # the images kubeadm deploys (registry.k8s.io/*), made of them
#   deploy/kind/build.sh --print-image   # the node image's name (turna.local/kind-node:<k8s version>)
#
# The node image: Debian 12 (debootstrap, kind's base packages; the tar is cached), kind's base
# files from its module, the binaries, a CNI configuration for one node, kind's entrypoint with
# fix_unprivileged, and the images imported into its containerd.
# Versions: kind, containerd, runc, crictl and the CNI plugins are the ones kind's own base image
# pins (images/base/Dockerfile of the kind module); Kubernetes and etcd are e2e/tools' (its
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd are reused);
# kubelet, kubeadm, kube-proxy and CoreDNS come from deploy/kind/tools/go.mod (the same
# Kubernetes; CoreDNS at the version kubeadm deploys). Cache: ${XDG_CACHE_HOME:-~/.cache}/turna/kind.
# shellcheck disable=SC2317  # the go_* steps are called through build_once
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"

KIND_VERSION=v0.33.0
CONTAINERD_VERSION=v2.3.4
RUNC_VERSION=v1.4.3
CRICTL_VERSION=v1.37.0
CNI_PLUGINS_VERSION=v1.9.1
KIND_TOOLS_MOD="$ROOT/deploy/kind/tools"
KIND_CACHE="${TURNA_KIND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/kind}"
BIN="$KIND_CACHE/bin"
MINOR="${K8S_VERSION#v1.}"; MINOR="${MINOR%%.*}"
NODE_IMAGE="turna.local/kind-node:$K8S_VERSION"
# What kubeadm of this version deploys (cmd/kubeadm/app/constants), checked against
# `kubeadm config images list` when the images are built.
ETCD_TAG="${ETCD_VERSION#v}-0"
COREDNS_TAG="$(awk '{for (i = 1; i < NF; i++) if ($i == "github.com/coredns/coredns") {print $(i+1); exit}}' "$KIND_TOOLS_MOD/go.mod")"
PAUSE_TAG=3.10.2

# stamp_of WORDS...: a key of the words (versions, the text of the functions that build).
stamp_of() { echo "$@" | sha256sum | cut -c1-16; }

# build_once NAME STAMP COMMAND...: runs COMMAND unless $BIN/.NAME holds STAMP.
build_once() {
	local name="$1" stamp="$2"; shift 2
	if [[ "$(cat "$BIN/.$name" 2> /dev/null)" == "$stamp" ]]; then return; fi
	local t0; t0=$(date +%s)
	log "building $name"
	"$@"
	echo "$stamp" > "$BIN/.$name"
	log "$name: $(($(date +%s) - t0))s"
}

k8s_ldflags() {
	local p ldflags="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR"
		ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$ldflags"
}

go_kind() { GOBIN="$BIN" CGO_ENABLED=0 nice -n 15 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION"; }
go_node() {
	(cd "$KIND_TOOLS_MOD" && CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "$(k8s_ldflags)" -o "$BIN/" \
		k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy \
		github.com/turna/turna/deploy/kind/tools/cmd/coredns)
}
go_containerd() {
	local m="github.com/containerd/containerd/v2" v="${CONTAINERD_VERSION#v}"
	GOBIN="$BIN" CGO_ENABLED=0 nice -n 15 go install -trimpath -tags "no_aufs no_zfs no_btrfs no_devmapper" \
		-ldflags "-s -w -X $m/version.Version=$v -X $m/version.Revision=$CONTAINERD_VERSION" \
		"$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/ctr@$CONTAINERD_VERSION" \
		"$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
}
go_runc() {
	# cgo and libseccomp (libseccomp-dev here; libseccomp2 in the node), as runc's own build.
	dpkg -s libseccomp-dev > /dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev > /dev/null
	GOBIN="$BIN" CGO_ENABLED=1 nice -n 15 go install -trimpath -tags seccomp \
		-ldflags "-s -w -X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@$RUNC_VERSION"
}
go_crictl() { GOBIN="$BIN" CGO_ENABLED=0 nice -n 15 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"; }
go_cni() {
	local m="github.com/containernetworking/plugins/plugins"
	mkdir -p "$BIN/cni"
	GOBIN="$BIN/cni" CGO_ENABLED=0 nice -n 15 go install -trimpath -ldflags "-s -w" \
		"$m/ipam/host-local@$CNI_PLUGINS_VERSION" "$m/main/loopback@$CNI_PLUGINS_VERSION" \
		"$m/main/ptp@$CNI_PLUGINS_VERSION" "$m/meta/portmap@$CNI_PLUGINS_VERSION"
}
cc_pause() {
	# Kubernetes' pause (build/pause/linux/pause.c of the k8s.io/kubernetes module), static.
	local src
	src="$(cd "$KIND_TOOLS_MOD" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
	gcc -Os -static -DVERSION="v$PAUSE_TAG-turna" -o "$BIN/pause" "$src"
	strip "$BIN/pause"
}

bins() {
	mkdir -p "$BIN"
	exec 9> "$BIN/.lock"
	flock 9
	build_once kind "$(stamp_of "$KIND_VERSION" "$(declare -f go_kind)")" go_kind
	build_once node "$(stamp_of "$K8S_VERSION" "$(cat "$KIND_TOOLS_MOD/go.mod" "$KIND_TOOLS_MOD/go.sum" "$KIND_TOOLS_MOD"/cmd/*/*.go)" "$(declare -f go_node k8s_ldflags)")" go_node
	build_once containerd "$(stamp_of "$CONTAINERD_VERSION" "$(declare -f go_containerd)")" go_containerd
	build_once runc "$(stamp_of "$RUNC_VERSION" "$(declare -f go_runc)")" go_runc
	build_once crictl "$(stamp_of "$CRICTL_VERSION" "$(declare -f go_crictl)")" go_crictl
	build_once cni "$(stamp_of "$CNI_PLUGINS_VERSION" "$(declare -f go_cni)")" go_cni
	build_once pause "$(stamp_of "$PAUSE_TAG" "$K8S_VERSION" "$(declare -f cc_pause)")" cc_pause
	"$ROOT/e2e/scripts/build-tools.sh"
}

# ---- the node's root filesystem: Debian 12 with kind's base packages ----
# Kind's list (images/base/Dockerfile) less the storage test tools (nfs-common, open-iscsi,
# e2fsprogs), which nothing here uses.
BASE_PACKAGES=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,fuse-overlayfs,bash,ca-certificates,curl,jq,procps
rootfs_tar() {
	local tar
	tar="$KIND_CACHE/rootfs-bookworm-$(stamp_of "$BASE_PACKAGES" | cut -c1-8).tar"
	if [[ ! -f $tar ]]; then
		command -v debootstrap > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null
		local dir; dir="$(mktemp -d "$KIND_CACHE/debootstrap.XXXXXX")"
		log "debootstrap bookworm ($BASE_PACKAGES)"
		nice -n 10 debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$dir" http://deb.debian.org/debian > "$KIND_CACHE/debootstrap.log" 2>&1 ||
			die "debootstrap failed: $(tail -5 "$KIND_CACHE/debootstrap.log")"
		rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/var/lib/apt/lists/"* "$dir/usr/share/doc" "$dir/usr/share/man"
		tar --numeric-owner -C "$dir" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
		rm -rf "$dir"
	fi
	echo "$tar"
}

# ---- the images kubeadm deploys, made of the binaries ----
# image_from BASE TAG ENTRYPOINT-JSON FILE:DEST...: a docker build of BASE plus the files.
image_from() {
	local base="$1" tag="$2" entrypoint="$3" ctx f; shift 3
	ctx="$(mktemp -d "$KIND_CACHE/ctx.XXXXXX")"
	{
		echo "FROM $base"
		for f in "$@"; do
			cp "${f%%:*}" "$ctx/$(basename "${f%%:*}")"
			echo "COPY $(basename "${f%%:*}") ${f#*:}"
		done
		echo "ENTRYPOINT $entrypoint"
	} > "$ctx/Dockerfile"
	DOCKER_BUILDKIT=1 "$(docker_client)" build -q -t "$tag" "$ctx" > /dev/null || die "docker build of $tag failed"
	rm -rf "$ctx"
}

docker_client() {
	if docker buildx version > /dev/null 2>&1; then echo docker; elif [[ -x /usr/bin/docker ]]; then echo /usr/bin/docker; else echo docker; fi
}

NODE_IMAGES=""
images() {
	bins
	"$ROOT/deploy/image/image.sh" base
	local tools="$TOOLS_BIN" r=registry.k8s.io base=turna.local/base:debian12 want have
	# kube-proxy runs iptables/nft and conntrack: its base is the node's Debian with them.
	docker image inspect turna.local/kind-rootfs:bookworm > /dev/null 2>&1 ||
		docker import - turna.local/kind-rootfs:bookworm < "$(rootfs_tar)" > /dev/null
	want="$("$BIN/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2> /dev/null | sort)"
	have="$(printf '%s\n' "$r/kube-apiserver:$K8S_VERSION" "$r/kube-controller-manager:$K8S_VERSION" \
		"$r/kube-scheduler:$K8S_VERSION" "$r/kube-proxy:$K8S_VERSION" "$r/coredns/coredns:$COREDNS_TAG" \
		"$r/pause:$PAUSE_TAG" "$r/etcd:$ETCD_TAG" | sort)"
	[[ $want == "$have" ]] || die "kubeadm $K8S_VERSION wants other images than this script builds: $want"
	log "images: $(tr '\n' ' ' <<< "$have")"
	image_from "$base" "$r/kube-apiserver:$K8S_VERSION" '["/usr/local/bin/kube-apiserver"]' "$tools/kube-apiserver:/usr/local/bin/"
	image_from "$base" "$r/kube-controller-manager:$K8S_VERSION" '["/usr/local/bin/kube-controller-manager"]' "$tools/kube-controller-manager:/usr/local/bin/"
	image_from "$base" "$r/kube-scheduler:$K8S_VERSION" '["/usr/local/bin/kube-scheduler"]' "$tools/kube-scheduler:/usr/local/bin/"
	image_from turna.local/kind-rootfs:bookworm "$r/kube-proxy:$K8S_VERSION" '["/usr/local/bin/kube-proxy"]' "$BIN/kube-proxy:/usr/local/bin/"
	image_from "$base" "$r/etcd:$ETCD_TAG" '["/usr/local/bin/etcd"]' "$tools/etcd:/usr/local/bin/"
	image_from "$base" "$r/coredns/coredns:$COREDNS_TAG" '["/coredns"]' "$BIN/coredns:/coredns"
	image_from "$base" "$r/pause:$PAUSE_TAG" '["/pause"]' "$BIN/pause:/pause"
	# kind's containerd configuration names pause 3.10 as the sandbox image.
	docker tag "$r/pause:$PAUSE_TAG" "$r/pause:3.10"
	NODE_IMAGES="$have $r/pause:3.10"
}

# ---- the node image ----
# Patched into kind's entrypoint (before its fix_mount): what `docker run --privileged` gives
# a node and the explicit capabilities of deploy/kind/docker do not (deploy/kind/README.md).
# shellcheck disable=SC2016  # expanded by the entrypoint, not here
ENTRYPOINT_PATCH='
# turna: a node run with explicit capabilities instead of --privileged (deploy/kind/docker):
# Docker mounts the cgroup hierarchies read-only then; remount them writable, as --privileged
# has them. Without CAP_SYS_RESOURCE nothing may lower an oom_score_adj: containerd must not try
# (restrict_oom_score_adj, as kind does for rootless nodes).
fix_unprivileged() {
  local m
  if findmnt -n -o OPTIONS /sys/fs/cgroup | grep -qw ro; then
    mount -o remount,rw /sys/fs/cgroup
  fi
  for m in $(findmnt -lun -o TARGET,OPTIONS -t cgroup,cgroup2 | awk "\$2 ~ /(^|,)ro(,|\$)/ {print \$1}"); do
    log_info "turna: remounting $m read-write"
    mount -o remount,bind,rw "$m"
  done
  if (( ! (0x$(awk "/^CapEff:/ {print \$2}" /proc/self/status) >> 24 & 1) )); then
    log_info "turna: no CAP_SYS_RESOURCE: containerd restrict_oom_score_adj = true"
    sed -i "s/restrict_oom_score_adj = false/restrict_oom_score_adj = true/" /etc/containerd/config.toml
  fi
}
fix_unprivileged
'

# A CNI configuration for a single-node cluster (kind's default CNI, kindnetd, is an image of
# its own that is not built here: the cluster config disables it): ptp with host-local on the
# first node's pod CIDR (deploy/kind/cluster.yaml: podSubnet 10.247.0.0/16, apart from the local
# clusters' 10.242-10.245), portmap for hostPorts.
CNI_CONFIG='{
  "cniVersion": "0.4.0",
  "name": "turna-kind",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
              "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "10.247.0.0/24"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}'

node() {
	local stamp
	images
	# shellcheck disable=SC2086  # one image name a word
	stamp="$(stamp_of "$(cat "$BIN"/.[a-z]*)" "$(docker image inspect -f '{{.Id}}' $NODE_IMAGES)" "$(rootfs_tar)" "$(declare -f node)" "$ENTRYPOINT_PATCH" "$CNI_CONFIG")"
	if [[ "$(docker image inspect -f '{{index .Config.Labels "turna.kind.stamp"}}' "$NODE_IMAGE" 2> /dev/null)" == "$stamp" ]]; then
		log "$NODE_IMAGE is up to date"
		return
	fi
	local kind_dir files rootfs cid
	kind_dir="$(cd "$KIND_TOOLS_MOD" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | awk -F'"' '$2 == "Dir" {print $4}')"
	files="$kind_dir/images/base/files"
	rootfs="$(mktemp -d "$KIND_CACHE/node-rootfs.XXXXXX")"
	log "assembling the node's root filesystem in $rootfs"
	tar -C "$rootfs" -xf "$(rootfs_tar)"
	# kind's base image: its files, with its modes (images/base/Dockerfile).
	install -m 0755 "$files"/usr/local/bin/* "$rootfs/usr/local/bin/"
	mkdir -p "$rootfs/kind/bin" "$rootfs/etc/containerd" "$rootfs/etc/default" "$rootfs/etc/sysctl.d" \
		"$rootfs/etc/systemd/system/kubelet.service.d" "$rootfs/etc/kubernetes/manifests" "$rootfs/opt/cni/bin" "$rootfs/etc/cni/net.d"
	install -m 0644 "$files"/kind/README.txt "$rootfs/kind/"
	install -m 0755 "$files"/kind/bin/* "$rootfs/kind/bin/"
	install -m 0644 "$files"/etc/crictl.yaml "$rootfs/etc/"
	install -m 0644 "$files"/etc/containerd/* "$rootfs/etc/containerd/"
	install -m 0644 "$files"/etc/default/* "$rootfs/etc/default/"
	install -m 0644 "$files"/etc/sysctl.d/* "$rootfs/etc/sysctl.d/"
	install -m 0644 "$files"/etc/systemd/system/*.service "$files"/etc/systemd/system/*.slice "$rootfs/etc/systemd/system/"
	install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* "$rootfs/etc/systemd/system/kubelet.service.d/"
	find "$rootfs/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
	rm -f "$rootfs"/lib/systemd/system/multi-user.target.wants/* "$rootfs"/etc/systemd/system/*.wants/* \
		"$rootfs"/lib/systemd/system/local-fs.target.wants/* "$rootfs"/lib/systemd/system/sockets.target.wants/*udev* \
		"$rootfs"/lib/systemd/system/sockets.target.wants/*initctl* "$rootfs"/lib/systemd/system/basic.target.wants/*
	echo "ReadKMsg=no" >> "$rootfs/etc/systemd/journald.conf"
	ln -sf /usr/lib/systemd/systemd "$rootfs/sbin/init"
	systemctl --root="$rootfs" enable kubelet.service containerd.service undo-mount-hacks.service > /dev/null 2>&1
	systemctl --root="$rootfs" mask systemd-binfmt.service > /dev/null 2>&1
	# The runtime, built from Go modules (bins).
	install -m 0755 "$BIN/containerd" "$BIN/ctr" "$BIN/containerd-shim-runc-v2" "$BIN/crictl" "$rootfs/usr/local/bin/"
	install -m 0755 "$BIN/runc" "$rootfs/usr/local/sbin/runc"
	install -m 0755 "$BIN"/cni/* "$rootfs/opt/cni/bin/"
	"$BIN/ctr" oci spec | python3 -c 'import json, sys
s = json.load(sys.stdin)
s.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
s["process"].pop("rlimits", None)
json.dump(s, sys.stdout, indent=4)' > "$rootfs/etc/containerd/cri-base.json"
	# The node: Kubernetes' binaries, version, and this machine's changes.
	install -m 0755 "$BIN/kubelet" "$BIN/kubeadm" "$TOOLS_BIN/kubectl" "$rootfs/usr/bin/"
	printf '%s' "$K8S_VERSION" > "$rootfs/kind/version"
	echo "$CNI_CONFIG" > "$rootfs/etc/cni/net.d/10-turna-kind.conflist"
	python3 - "$rootfs/usr/local/bin/entrypoint" "$ENTRYPOINT_PATCH" <<-'PY'
		import sys
		path, patch = sys.argv[1], sys.argv[2]
		s = open(path).read()
		anchor = "\nfix_mount\n"
		assert s.count(anchor) == 1, "kind's entrypoint changed: no single fix_mount call"
		open(path, "w").write(s.replace(anchor, "\n" + patch.strip() + anchor))
	PY
	log "importing the root filesystem"
	tar --numeric-owner -C "$rootfs" -c . | docker import - turna.local/kind-node:assembling > /dev/null
	rm -rf "$rootfs"
	# The images into the node's containerd, as kind's node-image build does.
	cid="$(docker run -d --entrypoint sleep --security-opt seccomp=unconfined turna.local/kind-node:assembling infinity)"
	# shellcheck disable=SC2064  # this container, now
	trap "docker rm -f $cid > /dev/null 2>&1 || true" EXIT
	docker exec -d "$cid" bash -c 'containerd > /var/log/containerd-build.log 2>&1'
	docker exec "$cid" bash -c 'for i in $(seq 1 100); do ctr version > /dev/null 2>&1 && exit; sleep 0.1; done; exit 1' ||
		die "containerd did not start in the build container"
	# shellcheck disable=SC2086  # one image name a word
	docker save $NODE_IMAGES |
		docker exec -i "$cid" ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests - > /dev/null
	docker exec "$cid" bash -c 'ctr --namespace=k8s.io images ls -q | grep -v "^sha256:" | grep -v "^import-" | tr "\n" " "; echo
		for i in $(ctr --namespace=k8s.io images ls -q | grep "^import-"); do ctr --namespace=k8s.io images rm "$i" > /dev/null; done
		pkill -x containerd; for i in $(seq 1 100); do pgrep -x containerd > /dev/null || break; sleep 0.1; done
		rm -f /var/log/containerd-build.log'
	docker commit "$cid" turna.local/kind-node:committed > /dev/null
	docker rm -f "$cid" > /dev/null
	trap - EXIT
	# kind's node image metadata (commit --change of Docker 20.10 has no STOPSIGNAL).
	printf '%s\n' 'FROM turna.local/kind-node:committed' 'ENV container=docker' \
		'STOPSIGNAL SIGRTMIN+3' "LABEL turna.kind.stamp=$stamp" \
		'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' 'CMD []' |
		DOCKER_BUILDKIT=1 "$(docker_client)" build -q -t "$NODE_IMAGE" - > /dev/null
	docker rmi turna.local/kind-node:assembling turna.local/kind-node:committed > /dev/null
	log "built $NODE_IMAGE ($(docker image inspect -f '{{.Size}}' "$NODE_IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}'))"
}

main() {
	local cmd="${1:-all}"
	[[ $# -gt 0 ]] && shift
	case "$cmd" in
	all | node) node ;;
	bins) bins ;;
	images) images ;;
	--print-image) echo "$NODE_IMAGE" ;;
	-h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" ;;
	*) die "unknown command $cmd" ;;
	esac
}

# One line, read whole before it runs: the script may be edited while it builds.
main "$@"; exit
