#!/usr/bin/env bash
# What the kernel does per proxied request, Turna against nginx: system calls by name (strace -c
# on every thread of the proxy; nginx's one worker process), context switches and page faults
# (perf stat software events), and user and system CPU per request (/proc, pinned as run.sh
# pins: proxy on core 1, wrk and the backend on core 0). The same job as run.sh: one route, the
# nginx backend serving 1 KiB, keep-alive, wrk with 1 and 64 connections, one worker each.
# Counts do not depend on the machine's load; the CPU split does (ROUNDS of DURATION each).
# Needs wrk, strace, perf and nginx (Debian packages, installed when missing).
set -euo pipefail

DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-2}
declare -A PACKAGE=([wrk]=wrk [strace]=strace [perf]=linux-perf [nginx]=nginx-light)
# shellcheck source=setup.sh
source "$(dirname "$0")/setup.sh"
render 1 backend.conf nginx.conf

"${LOAD[@]}" nginx -c "$DIR/backend.conf" & PIDS+=($!)
"${PROXY[@]}" nginx -c "$DIR/nginx.conf" & PIDS+=($!)
NGINX_MASTER=$!
TOKIO_WORKER_THREADS=1 "${PROXY[@]}" "$TURNA_SERVE" "$HERE/turna.yaml" 127.0.0.1 127.0.0.1:0 2>"$DIR/turna.log" & PIDS+=($!)
declare -A PROCESS=([turna]=$! [nginx]=) PORT=([turna]=8083 [nginx]=8081)
listening "$DIR/turna.log" 9000 8081 8083
# nginx's worker, forked once its master has bound the port.
for _ in $(seq 100); do
  PROCESS[nginx]=$(pgrep -P "$NGINX_MASTER") && break
  sleep 0.1
done

requests() { awk '/requests in/ {print $1}'; }

# System calls per request of proxy $1 under $2 connections, the most frequent first.
syscalls() { # name connections
  local pid=${PROCESS[$1]} threads=() tid tracer out n
  for tid in /proc/"$pid"/task/*; do threads+=(-p "${tid##*/}"); done
  strace -c -f "${threads[@]}" -o "$DIR/strace" 2>/dev/null & tracer=$!
  sleep 0.3
  out=$("${LOAD[@]}" wrk -t1 -c"$2" -d3s "http://127.0.0.1:${PORT[$1]}/")
  kill -INT "$tracer"
  wait "$tracer" 2>/dev/null || true
  n=$(requests <<<"$out")
  awk -v n="$n" -v p="$1" -v c="$2" '
    $1 ~ /^[0-9.]+$/ && $NF != "total" { calls[$NF] = $4 }
    $NF == "total" { total = $4 }
    END {
      printf "%-6s c%-3s system calls per request %.2f:", p, c, total / n
      for (s in calls) if (calls[s] / n >= 0.01) printf " %s %.2f", s, calls[s] / n
      printf "\n"
    }' "$DIR/strace"
}

# Context switches and page faults per request.
events() { # name connections
  local out n
  perf stat -e context-switches,page-faults -p "${PROCESS[$1]}" -o "$DIR/perf" -- sleep 3 &
  local counter=$!
  out=$("${LOAD[@]}" wrk -t1 -c"$2" -d3s "http://127.0.0.1:${PORT[$1]}/")
  wait "$counter" || true
  n=$(requests <<<"$out")
  awk -v n="$n" -v p="$1" -v c="$2" '
    /context-switches/ { gsub(",", "", $1); cs = $1 }
    /page-faults/ { gsub(",", "", $1); pf = $1 }
    END { printf "%-6s c%-3s context switches %.3f, page faults %.4f per request\n", p, c, cs / n, pf / n }' "$DIR/perf"
}

# User and system CPU of proxy $1 per request.
split() { # name connections
  local before after out n
  before=$(awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/${PROCESS[$1]}/stat")
  out=$("${LOAD[@]}" wrk -t1 -c"$2" -d"$DURATION" "http://127.0.0.1:${PORT[$1]}/")
  after=$(awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/${PROCESS[$1]}/stat")
  n=$(requests <<<"$out")
  awk -v n="$n" -v p="$1" -v c="$2" -v hz="$HZ" -v b="$before" -v a="$after" 'BEGIN {
    split(b, x, " "); split(a, y, " ")
    u = (y[1] - x[1]) / hz * 1e6 / n; s = (y[2] - x[2]) / hz * 1e6 / n
    printf "%-6s c%-3s %8d requests, CPU per request: user %.1f us, system %.1f us, total %.1f us\n", p, c, n, u, s, u + s
  }'
}

for connections in 1 64; do
  for proxy in turna nginx; do
    "${LOAD[@]}" wrk -t1 -c"$connections" -d1s "http://127.0.0.1:${PORT[$proxy]}/" >/dev/null
    syscalls "$proxy" "$connections"
    events "$proxy" "$connections"
  done
done
for round in $(seq "$ROUNDS"); do
  for connections in 1 64; do
    for proxy in turna nginx; do
      printf 'round %s ' "$round"
      split "$proxy" "$connections"
    done
  done
done
