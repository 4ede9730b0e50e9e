# syntax=docker/dockerfile:1
# Turna's image: one `turna` binary for the controller and the proxies it provisions (the
# controller passes the mode as arguments). Non-root (65532), nothing to write on the root
# filesystem, CA certificates for BackendTLSPolicy's wellKnownCACertificates: System.
#
#   docker build -t ghcr.io/rakunlabs/turna:0.1.0 .
#
# glibc rather than a static musl binary: musl's allocator costs the proxy a large share of its
# throughput, and distroless/cc carries exactly the C runtime the binary links (libc, libgcc_s).

ARG RUST_VERSION=1.92

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
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

# Debian 12 like the builder, so the glibc the binary was linked against is there.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/turna /usr/local/bin/turna
USER 65532:65532
# /healthz, /ready, /metrics; the controller's IR push server.
EXPOSE 9901 9443
ENTRYPOINT ["/usr/local/bin/turna"]
CMD ["controller", "--config", "/etc/turna/turna.yaml"]
