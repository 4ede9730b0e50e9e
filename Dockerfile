# Turna's image: one `turna` binary for the controller and the proxies it provisions (the
# controller passes the mode as arguments). Non-root (65532), nothing to write on the root
# filesystem, CA certificates for BackendTLSPolicy's wellKnownCACertificates: System.
#
# The published image (BuildKit: DOCKER_BUILDKIT=1 or buildx), from the repository root:
#
#   docker build -t ghcr.io/rakunlabs/turna:0.1.0 .
#
# Where no container registry is reachable, `make image` (deploy/image/image.sh) builds the same
# image from what is on the machine: BASE=turna.local/base:debian12, a root filesystem made of
# Debian 12 packages (libc6, libgcc-s1, ca-certificates, netbase, tzdata) and the same users as
# distroless, and TURNA_FROM=host, the `turna` binary built on the host (a Debian 12 host, so the
# glibc it links is the base's), taken from a build context that holds only that file:
#
#   docker build -f Dockerfile --build-arg BASE=turna.local/base:debian12 \
#     --build-arg TURNA_FROM=host -t ghcr.io/rakunlabs/turna:0.1.0 <folder with turna>
#
# glibc rather than a static musl binary: musl's allocator costs the proxy a large share of its
# throughput, and distroless/cc carries exactly the C runtime the binary links (libc, libgcc_s).
# BuildKit builds only the stages the target needs, so TURNA_FROM=host pulls no Rust image.

ARG RUST_VERSION=1.92
# The runtime base: distroless by default (published); turna.local/base:debian12 made locally.
ARG BASE=gcr.io/distroless/cc-debian12:nonroot
# pgo: build turna here, profile-guided (published); host: the `turna` file of the build context.
ARG TURNA_FROM=pgo

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS turna-pgo
WORKDIR /src
COPY . .
# Profile-guided: dataplane/bench/pgo.sh runs the proxy instrumented through the benchmark's job
# (an nginx backend, wrk and h2load on loopback) and builds `turna` with that profile, which
# takes a quarter of the instructions off a proxied request.
RUN apt-get update && apt-get install -y --no-install-recommends nginx-light wrk nghttp2-client \
    && rm -rf /var/lib/apt/lists/* && rustup component add llvm-tools
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    turna=$(dataplane/bench/pgo.sh --locked -p turna-operator --bin turna) \
    && install -D -m 0755 "$turna" /out/turna

FROM scratch AS turna-host
COPY turna /out/turna

FROM turna-${TURNA_FROM} AS turna

# Debian 12 like the builder, so the glibc the binary was linked against is there.
FROM ${BASE}
ARG BASE
LABEL org.opencontainers.image.base.name="${BASE}"
COPY --from=turna /out/turna /usr/local/bin/turna
USER 65532:65532
# /healthz, /ready, /metrics; the controller's IR push server.
EXPOSE 9901 9443
ENTRYPOINT ["/usr/local/bin/turna"]
CMD ["controller", "--config", "/etc/turna/turna.yaml"]
