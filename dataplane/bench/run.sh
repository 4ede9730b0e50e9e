#!/usr/bin/env bash
# The same proxying job through Turna, nginx and HAProxy: one route, one nginx backend on
# loopback serving 1 KiB, keep-alive. Load from wrk (HTTP/1.1, 1 and 64 connections) and h2load
# (HTTP/2 prior knowledge), proxies alternating, each limited to THREADS worker threads.
# Needs wrk, h2load (nghttp2-client), nginx and haproxy (Debian packages, installed when missing).
# Turna with THREADS=1 runs on a current-thread Tokio runtime (examples/serve.rs).
set -euo pipefail

THREADS=${THREADS:-1}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
declare -A PACKAGE=([wrk]=wrk [h2load]=nghttp2-client [nginx]=nginx-light [haproxy]=haproxy)
# shellcheck source=setup.sh
source "$(dirname "$0")/setup.sh"
for f in backend.conf nginx.conf haproxy.cfg; do
  sed -e "s|BENCH_DIR|$DIR|g" -e "s|THREADS|$THREADS|g" "$HERE/$f" > "$DIR/$f"
done

nginx -c "$DIR/backend.conf" & PIDS+=($!)
nginx -c "$DIR/nginx.conf" & PIDS+=($!)
haproxy -f "$DIR/haproxy.cfg" & PIDS+=($!)
TOKIO_WORKER_THREADS=$THREADS "$TURNA_SERVE" "$HERE/turna.yaml" 127.0.0.1 127.0.0.1:0 2>"$DIR/turna.log" & PIDS+=($!)
sleep 1

declare -A RPS P99
h1() { # name port connections
  local out
  out=$(wrk -t1 -c"$3" -d"$DURATION" --latency "http://127.0.0.1:$2/")
  RPS[$1]=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  P99[$1]=$(awk '$1 == "99%" {print $2}' <<<"$out")
}
h2() { # name port
  local out
  out=$(h2load -c16 -m8 -D "${DURATION%s}" "http://127.0.0.1:$2/" 2>/dev/null)
  RPS[$1]=$(awk '/^finished in/ {print $4}' <<<"$out")
  P99[$1]="-"
}
ms() { # wrk latency (us, ms or s) in milliseconds
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; print n }'
}

printf '%-10s %-8s %12s %10s\n' proxy load req/s p99
for round in $(seq "$ROUNDS"); do
  for load in c1 c64 h2; do
    for proxy in turna nginx haproxy; do
      case $proxy in turna) port=8083 h2port=8083 ;; nginx) port=8081 h2port=8091 ;; haproxy) port=8082 h2port=8082 ;; esac
      case $load in
        c1) h1 "$proxy-$load" "$port" 1 ;;
        c64) h1 "$proxy-$load" "$port" 64 ;;
        h2) h2 "$proxy-$load" "$h2port" ;;
      esac
      printf '%-10s %-8s %12s %10s\n' "$proxy" "$load" "${RPS[$proxy-$load]}" "${P99[$proxy-$load]}"
    done
    for other in nginx haproxy; do
      ratio=$(awk -v a="${RPS[turna-$load]}" -v b="${RPS[$other-$load]}" 'BEGIN { printf "%.2f", a / b }')
      if [ "${P99[turna-$load]}" != "-" ]; then
        p99=$(awk -v a="$(ms "${P99[turna-$load]}")" -v b="$(ms "${P99[$other-$load]}")" 'BEGIN { printf "%.2f", a / b }')
      else
        p99="-"
      fi
      echo "round $round $load: Turna/$other req/s $ratio, p99 $p99"
    done
  done
done
