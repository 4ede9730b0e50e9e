#!/usr/bin/env bash
# Instructions per proxied request (valgrind callgrind), Turna against nginx: the same job as
# run.sh (one route, the nginx backend serving 1 KiB, keep-alive), counted in user space so the
# figure does not depend on the machine's load. REQUESTS per load (default 5000), after a
# warm-up of the same size. Loads: HTTP/1.1 with 1 and 64 connections, h2c with 16x8 streams.
# TURNA_SERVE names a prebuilt examples/serve binary; by default it is built. KEEP=dir keeps
# the callgrind profiles there (for callgrind_annotate); ONLY=turna, turna-log, turna-trace, turna-ratelimit, turna-compress or
# nginx measures one. turna-log is Turna with its JSON access log on (to a file; the writer
# thread's instructions count too): the cost of logging, beside Turna without it. turna-trace is
# Turna with its Gateway traced, every request sampled, spans exported in batches over OTLP/HTTP
# (turna-traced.yaml; the exporting thread counts too): the cost of tracing. turna-ratelimit has
# a local rate limit on its rule (turna-ratelimited.yaml, never reached) and turna-compress
# compresses every response with gzip (turna-compressed.yaml, the load accepting gzip): the
# cost of a traffic policy's rate limit and of compression per request.
# POST_BYTES=n makes every request a POST with an n-byte body (the backend answers it as a GET).
# SPLIT_BODY=1 (with POST_BYTES) measures one connection whose POSTs each write the body 2 ms
# after the head (split_post.py, REQUESTS of them; the only load then).
# Needs valgrind, h2load (nghttp2-client) and nginx (Debian packages, installed when missing).
set -euo pipefail

REQUESTS=${REQUESTS:-5000}
declare -A PACKAGE=([valgrind]=valgrind [callgrind_control]=valgrind [h2load]=nghttp2-client [nginx]=nginx-light)
# shellcheck source=setup.sh
source "$(dirname "$0")/setup.sh"
render 1 backend.conf nginx.conf
# nginx as one process, so callgrind sees the process that serves.
sed -i '1i master_process off;' "$DIR/nginx.conf"
nginx -c "$DIR/backend.conf" & PIDS+=($!)

if [ -n "${POST_BYTES:-}" ]; then head -c "$POST_BYTES" /dev/zero | tr '\0' p > "$DIR/post.txt"; fi
load() { # port kind; LOAD_HEADER adds a request header (name: value), POST_BYTES a body
  local header=()
  [ -n "${LOAD_HEADER:-}" ] && header=(-H "$LOAD_HEADER")
  [ -n "${POST_BYTES:-}" ] && header+=(-d "$DIR/post.txt")
  if [ -n "${SPLIT_BODY:-}" ]; then python3 "$HERE/split_post.py" "$1" "$REQUESTS" "${POST_BYTES:?SPLIT_BODY needs POST_BYTES}"; return; fi
  case $2 in
    c1) h2load --h1 -n "$REQUESTS" -c1 "${header[@]}" "http://127.0.0.1:$1/" >/dev/null ;;
    c64) h2load --h1 -n "$REQUESTS" -c64 "${header[@]}" "http://127.0.0.1:$1/" >/dev/null ;;
    h2) h2load -n "$REQUESTS" -c16 -m8 "${header[@]}" "http://127.0.0.1:$1/" >/dev/null ;;
  esac
}

measure() { # name port h2port command...
  local name=$1 port=$2 h2port=$3
  shift 3
  valgrind --tool=callgrind --callgrind-out-file="$DIR/$name.%p" "$@" 2>"$DIR/$name.valgrind" & PIDS+=($!)
  local pid=$!
  listening "$DIR/$name.valgrind" "$port"
  local kinds="c1 c64 h2"
  [ -n "${SPLIT_BODY:-}" ] && kinds=split
  for kind in $kinds; do
    local p=$port
    [ "$kind" = h2 ] && p=$h2port
    load "$p" "$kind"
    callgrind_control -z "$pid" >/dev/null 2>&1
    load "$p" "$kind"
    callgrind_control -d "$kind" "$pid" >/dev/null 2>&1
    local file
    file=$(ls -t "$DIR/$name.$pid".* | head -1)
    local ir
    ir=$(awk '/^summary:/ {print $2}' "$file")
    printf '%-8s %-4s %10d instructions/request\n' "$name" "$kind" $((ir / REQUESTS))
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && mv "$file" "$KEEP/$name.$kind"; else rm -f "$file"; fi
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

if [ "${ONLY:-turna}" = turna ]; then TOKIO_WORKER_THREADS=1 measure turna 8083 8083 "$TURNA_SERVE" "$HERE/turna.yaml" 127.0.0.1 127.0.0.1:0; fi
if [ "${ONLY:-turna-log}" = turna-log ]; then
  TURNA_ACCESS_LOG=json TURNA_ACCESS_LOG_PATH="$DIR/access.log" TOKIO_WORKER_THREADS=1 \
    measure turna-log 8083 8083 "$TURNA_SERVE" "$HERE/turna.yaml" 127.0.0.1 127.0.0.1:0
  echo "turna-log wrote $(wc -l <"$DIR/access.log") lines"
fi
if [ "${ONLY:-turna-trace}" = turna-trace ]; then
  TOKIO_WORKER_THREADS=1 measure turna-trace 8083 8083 "$TURNA_SERVE" "$HERE/turna-traced.yaml" 127.0.0.1 127.0.0.1:0
fi
if [ "${ONLY:-turna-ratelimit}" = turna-ratelimit ]; then
  TOKIO_WORKER_THREADS=1 measure turna-ratelimit 8083 8083 "$TURNA_SERVE" "$HERE/turna-ratelimited.yaml" 127.0.0.1 127.0.0.1:0
fi
if [ "${ONLY:-turna-compress}" = turna-compress ]; then
  LOAD_HEADER="accept-encoding: gzip" TOKIO_WORKER_THREADS=1 \
    measure turna-compress 8083 8083 "$TURNA_SERVE" "$HERE/turna-compressed.yaml" 127.0.0.1 127.0.0.1:0
fi
if [ "${ONLY:-nginx}" = nginx ]; then measure nginx 8081 8091 nginx -c "$DIR/nginx.conf"; fi
