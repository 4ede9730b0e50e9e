#!/usr/bin/env bash
# The same proxying job through Turna, nginx and HAProxy: one route, one nginx backend on
# loopback serving 1 KiB, keep-alive. Load from wrk (HTTP/1.1, 1 and 64 connections) and h2load
# (HTTP/2 prior knowledge), proxies alternating, each limited to THREADS worker threads.
# Needs wrk, h2load (nghttp2-client), nginx and haproxy (Debian packages, installed when missing).
# Turna with THREADS=1 runs on a current-thread Tokio runtime (examples/serve.rs).
# With two or more cores (PIN=1, the default there) the proxies run on core 1 and the load
# generators and the backend on core 0, so each proxy's process CPU (user + system, from /proc,
# every thread and worker process) per request is its own: reported beside req/s and p99.
# turna-log is a second Turna with its JSON access log on (written to a file in the scratch
# folder): what logging costs, as ratios to Turna without it.
set -euo pipefail

THREADS=${THREADS:-1}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
declare -A PACKAGE=([wrk]=wrk [h2load]=nghttp2-client [nginx]=nginx-light [haproxy]=haproxy)
# shellcheck source=setup.sh
source "$(dirname "$0")/setup.sh"
render "$THREADS" backend.conf nginx.conf haproxy.cfg

"${LOAD[@]}" nginx -c "$DIR/backend.conf" & PIDS+=($!)
"${PROXY[@]}" nginx -c "$DIR/nginx.conf" & PIDS+=($!)
declare -A PROCESS=([nginx]=$!)
"${PROXY[@]}" haproxy -f "$DIR/haproxy.cfg" & PIDS+=($!)
PROCESS[haproxy]=$!
TOKIO_WORKER_THREADS=$THREADS "${PROXY[@]}" "$TURNA_SERVE" "$HERE/turna.yaml" 127.0.0.1 127.0.0.1:0 2>"$DIR/turna.log" & PIDS+=($!)
PROCESS[turna]=$!
sed 's/bindPort: 8083/bindPort: 8084/' "$HERE/turna.yaml" > "$DIR/turna-log.yaml"
TURNA_ACCESS_LOG=json TURNA_ACCESS_LOG_PATH="$DIR/access.log" TOKIO_WORKER_THREADS=$THREADS "${PROXY[@]}" \
  "$TURNA_SERVE" "$DIR/turna-log.yaml" 127.0.0.1 127.0.0.1:0 2>"$DIR/turna-log.log" & PIDS+=($!)
PROCESS[turnalog]=$!
listening "$DIR/turna.log" 9000 8081 8091 8082 8083 8084

declare -A RPS P99 CPU
# Runs a load generator against proxy $1; sets its req/s, p99 and CPU (us) per request.
measure() { # name kind port [connections]
  local out before after requests
  before=$(ticks "${1%%-*}")
  if [ "$2" = h1 ]; then
    out=$("${LOAD[@]}" wrk -t1 -c"$4" -d"$DURATION" --latency "http://127.0.0.1:$3/")
    RPS[$1]=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    P99[$1]=$(awk '$1 == "99%" {print $2}' <<<"$out")
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
  else
    out=$("${LOAD[@]}" h2load -c16 -m8 -D "${DURATION%s}" "http://127.0.0.1:$3/" 2>/dev/null)
    RPS[$1]=$(awk '/^finished in/ {print $4}' <<<"$out")
    P99[$1]="-"
    requests=$(awk '/^requests:/ {print $8}' <<<"$out")
  fi
  after=$(ticks "${1%%-*}")
  CPU[$1]=$(awk -v t=$((after - before)) -v hz="$HZ" -v n="$requests" 'BEGIN { printf "%.1f", (n > 0 ? t / hz * 1e6 / n : 0) }')
}
ms() { # wrk latency (us, ms or s) in milliseconds
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; print n }'
}

printf '%-10s %-8s %12s %10s %14s\n' proxy load req/s p99 'CPU us/req'

for round in $(seq "$ROUNDS"); do
  for load in c1 c64 h2; do
    for proxy in turna nginx haproxy turnalog; do
      case $proxy in
        turna) port=8083 h2port=8083 ;; nginx) port=8081 h2port=8091 ;;
        haproxy) port=8082 h2port=8082 ;; turnalog) port=8084 h2port=8084 ;;
      esac
      case $load in
        c1) measure "$proxy-$load" h1 "$port" 1 ;;
        c64) measure "$proxy-$load" h1 "$port" 64 ;;
        h2) measure "$proxy-$load" h2 "$h2port" ;;
      esac
      printf '%-10s %-8s %12s %10s %14s\n' "$proxy" "$load" "${RPS[$proxy-$load]}" "${P99[$proxy-$load]}" "${CPU[$proxy-$load]}"
    done
    for other in nginx haproxy; do
      ratio=$(awk -v a="${RPS[turna-$load]}" -v b="${RPS[$other-$load]}" 'BEGIN { printf "%.2f", a / b }')
      if [ "${P99[turna-$load]}" != "-" ]; then
        p99=$(awk -v a="$(ms "${P99[turna-$load]}")" -v b="$(ms "${P99[$other-$load]}")" 'BEGIN { printf "%.2f", a / b }')
      else
        p99="-"
      fi
      cpu=$(awk -v a="${CPU[turna-$load]}" -v b="${CPU[$other-$load]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
      echo "round $round $load: Turna/$other req/s $ratio, p99 $p99, CPU per request $cpu"
    done
    ratio=$(awk -v a="${RPS[turnalog-$load]}" -v b="${RPS[turna-$load]}" 'BEGIN { printf "%.2f", a / b }')
    cpu=$(awk -v a="${CPU[turnalog-$load]}" -v b="${CPU[turna-$load]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    echo "round $round $load: Turna with access log / without: req/s $ratio, CPU per request $cpu"
  done
done
