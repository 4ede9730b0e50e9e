#!/usr/bin/env bash
# Turna, nginx and HAProxy on the protocols beyond plain HTTP/1.1, one worker each, proxies
# alternating in ROUNDS rounds of DURATION per load:
#
#   https        HTTPS, TLS 1.3, keep-alive: wrk, 64 connections, 1 KiB responses    req/s
#   https-new    a new TLS 1.3 connection per request (full handshake, X25519, never  conn/s
#                a resumption: turna-bench-load handshakes, 16 at once)
#   h2-tls       HTTP/2 over TLS 1.3 (ALPN h2): h2load, 16 connections x 8 streams     req/s
#   grpc-unary   gRPC unary calls over h2c to grpc-go's benchmark service, 4           RPC/s
#                connections x 16 calls in flight, 64 B requests, 1 KiB responses
#   grpc-stream  the same as request/response round trips on 4 x 16 bidirectional      msg/s
#                streams
#   tcp          TCP passthrough, backend to client, 4 connections                    Gbit/s
#   tls          TLS passthrough by SNI (the backend terminates TLS 1.3), 4 connections Gbit/s
#   udp          UDP datagrams echoed, 16 client sockets x 8 in flight, 64 B           dgram/s
#                (HAProxy has no UDP: "-")
#
# The HTTP backend is nginx serving 1 KiB (protocols-backend.conf); the gRPC, TCP, TLS and UDP
# backends and the loads Debian has no tool for are turna-bench-load (bench/load, a Go module,
# built into ~/.cache/turna/bench-bin). The proxies' configurations are protocols.yaml (Turna,
# through the serve example with the certificate on its command line), protocols-nginx.conf and
# protocols-haproxy.cfg; the certificate is a self-signed EC P-256 one made here.
# Needs wrk, h2load (nghttp2-client), nginx with its stream module (libnginx-mod-stream),
# haproxy and openssl (Debian packages, installed when missing) and Go (GOTOOLCHAIN go1.27.3).
# With two or more cores (PIN=1, the default there) the proxies run on core 1 and the load
# generators and backends on core 0, so each proxy's process CPU (user + system, from /proc,
# every thread and worker process) per unit is its own: reported beside the rate, with the
# Turna/nginx and Turna/HAProxy ratios of both, and their means over the rounds at the end.
set -euo pipefail

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
LOADS=${LOADS:-https https-new h2-tls grpc-unary grpc-stream tcp tls udp}
declare -A PACKAGE=([wrk]=wrk [h2load]=nghttp2-client [nginx]=nginx [haproxy]=haproxy [openssl]=openssl
  [/usr/lib/nginx/modules/ngx_stream_module.so]=libnginx-mod-stream)
# shellcheck source=setup.sh
source "$(dirname "$0")/setup.sh"

# turna-bench-load, rebuilt when its sources change.
command -v go >/dev/null || { echo "protocols.sh: needs Go (for bench/load)" >&2; exit 1; }
BIN_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/turna/bench-bin
LOADGEN=$BIN_DIR/turna-bench-load
stamp=$(cat "$HERE"/load/go.mod "$HERE"/load/go.sum "$HERE"/load/*.go | sha256sum | cut -c1-16)
if [ ! -x "$LOADGEN" ] || [ "$(cat "$LOADGEN.stamp" 2>/dev/null)" != "$stamp" ]; then
  mkdir -p "$BIN_DIR"
  (cd "$HERE/load" && GOTOOLCHAIN=${TURNA_GOTOOLCHAIN:-go1.27.3} CGO_ENABLED=0 go build -trimpath -o "$LOADGEN.tmp" .)
  mv -f "$LOADGEN.tmp" "$LOADGEN"
  echo "$stamp" > "$LOADGEN.stamp"
fi

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test -keyout "$DIR/key.pem" -out "$DIR/cert.pem" 2>/dev/null
cat "$DIR/cert.pem" "$DIR/key.pem" > "$DIR/cert-and-key.pem"
render 1 protocols-backend.conf protocols-nginx.conf protocols-haproxy.cfg

"${LOAD[@]}" nginx -c "$DIR/protocols-backend.conf" & PIDS+=($!)
"${LOAD[@]}" "$LOADGEN" grpc-server -listen 127.0.0.1:9151 & PIDS+=($!)
"${LOAD[@]}" "$LOADGEN" stream-source -listen 127.0.0.1:9120 & PIDS+=($!)
"${LOAD[@]}" "$LOADGEN" stream-source -listen 127.0.0.1:9144 -cert "$DIR/cert.pem" -key "$DIR/key.pem" & PIDS+=($!)
"${LOAD[@]}" "$LOADGEN" udp-echo -listen 127.0.0.1:9153 & PIDS+=($!)
"${PROXY[@]}" nginx -c "$DIR/protocols-nginx.conf" & PIDS+=($!)
declare -A PROCESS=([nginx]=$!)
"${PROXY[@]}" haproxy -f "$DIR/protocols-haproxy.cfg" & PIDS+=($!)
PROCESS[haproxy]=$!
TOKIO_WORKER_THREADS=1 "${PROXY[@]}" "$TURNA_SERVE" "$HERE/protocols.yaml" 127.0.0.1 127.0.0.1:0 \
  "bench/cert=$DIR/cert.pem,$DIR/key.pem" 2>"$DIR/turna.log" & PIDS+=($!)
PROCESS[turna]=$!

# Every TCP port listening, or the script stops with Turna's log.
listening "$DIR/turna.log" 9100 9151 9120 9144 8143 8151 8120 8144 8243 8251 8220 8244 8343 8351 8320 8344

# The port of a load on a proxy: 81xx nginx, 82xx HAProxy, 83xx Turna.
port() { # proxy load
  local base
  case $1 in nginx) base=8100 ;; haproxy) base=8200 ;; turna) base=8300 ;; esac
  case $2 in
    https | https-new | h2-tls) echo $((base + 43)) ;;
    grpc-*) echo $((base + 51)) ;;
    tcp) echo $((base + 20)) ;;
    tls) echo $((base + 44)) ;;
    udp) echo $((base + 53)) ;;
  esac
}
declare -A UNIT=([https]=req/s [https-new]=conn/s [h2-tls]=req/s [grpc-unary]=RPC/s [grpc-stream]=msg/s
  [tcp]=Gbit/s [tls]=Gbit/s [udp]=dgram/s)
# What the CPU is given per: the rate's unit, and for throughput a megabyte (10^6 bytes).
cpu_unit() { case $1 in tcp | tls) echo us/MB ;; *) echo "us/${UNIT[$1]%/s}" ;; esac; }

declare -A RATE CPU
# Runs load $2 through proxy $1; sets its rate and its CPU (us) per unit.
measure() { # proxy load
  local key=$1-$2 port out before after count
  port=$(port "$1" "$2")
  before=$(ticks "$1")
  case $2 in
    https)
      out=$("${LOAD[@]}" wrk -t1 -c64 -d"$DURATION" "https://127.0.0.1:$port/")
      if grep -q -E 'Socket errors|Non-2xx' <<<"$out"; then echo "$1 $2: $(grep -E 'Socket errors|Non-2xx' <<<"$out")" >&2; fi
      RATE[$key]=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      count=$(awk '/requests in/ {print $1}' <<<"$out")
      ;;
    h2-tls)
      out=$("${LOAD[@]}" h2load -c16 -m8 -D "${DURATION%s}" "https://127.0.0.1:$port/" 2>/dev/null)
      if ! grep -q '^TLS Protocol: TLSv1.3$' <<<"$out" || ! grep -q '^Application protocol: h2$' <<<"$out"; then
        echo "$1 $2: not HTTP/2 over TLS 1.3: $out" >&2
        exit 1
      fi
      RATE[$key]=$(awk '/^finished in/ {print $4}' <<<"$out")
      count=$(awk '/^requests:/ {print $8}' <<<"$out")
      ;;
    *)
      case $2 in
        https-new) out=$("${LOAD[@]}" "$LOADGEN" handshakes -addr "127.0.0.1:$port" -sni bench.test -concurrency 16 -duration "$DURATION") ;;
        grpc-unary) out=$("${LOAD[@]}" "$LOADGEN" grpc -addr "127.0.0.1:$port" -mode unary -conns 4 -concurrency 16 -duration "$DURATION") ;;
        grpc-stream) out=$("${LOAD[@]}" "$LOADGEN" grpc -addr "127.0.0.1:$port" -mode stream -conns 4 -concurrency 16 -duration "$DURATION") ;;
        tcp) out=$("${LOAD[@]}" "$LOADGEN" stream-sink -addr "127.0.0.1:$port" -conns 4 -duration "$DURATION") ;;
        tls) out=$("${LOAD[@]}" "$LOADGEN" stream-sink -addr "127.0.0.1:$port" -sni bench.test -conns 4 -duration "$DURATION") ;;
        udp) out=$("${LOAD[@]}" "$LOADGEN" udp -addr "127.0.0.1:$port" -clients 16 -window 8 -size 64 -duration "$DURATION") ;;
      esac
      if ! grep -q ' errors=0$' <<<"$out"; then echo "$1 $2: $out" >&2; fi
      RATE[$key]=$(sed -n 's/.* rate=\([^ ]*\) .*/\1/p' <<<"$out")
      count=$(sed -n 's/^count=\([^ ]*\) .*/\1/p' <<<"$out")
      # Throughput counts bytes: CPU per megabyte.
      case $2 in tcp | tls) count=$(awk -v b="$count" 'BEGIN { print b / 1e6 }') ;; esac
      ;;
  esac
  after=$(ticks "$1")
  CPU[$key]=$(awk -v t=$((after - before)) -v hz="$HZ" -v n="$count" 'BEGIN { printf "%.2f", (n > 0 ? t / hz * 1e6 / n : 0) }')
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

declare -A SUM
ROW='%-8s %-12s %12s %-8s %10s %s\n'
# shellcheck disable=SC2059 # the format is ROW
printf "$ROW" proxy load rate unit CPU per
for round in $(seq "$ROUNDS"); do
  for load in $LOADS; do
    for proxy in turna nginx haproxy; do
      if [ "$proxy-$load" = haproxy-udp ]; then
        # shellcheck disable=SC2059
        printf "$ROW" "$proxy" "$load" - - - ""
        continue
      fi
      measure "$proxy" "$load"
      # shellcheck disable=SC2059
      printf "$ROW" "$proxy" "$load" "${RATE[$proxy-$load]}" "${UNIT[$load]}" "${CPU[$proxy-$load]}" "$(cpu_unit "$load")"
    done
    for other in nginx haproxy; do
      if [ "$other-$load" = haproxy-udp ]; then
        echo "round $round $load: Turna/$other -"
        continue
      fi
      rate=$(ratio "${RATE[turna-$load]}" "${RATE[$other-$load]}")
      cpu=$(ratio "${CPU[turna-$load]}" "${CPU[$other-$load]}")
      SUM[$other-$load-rate]=$(awk -v s="${SUM[$other-$load-rate]:-0}" -v r="$rate" 'BEGIN { print s + r }')
      SUM[$other-$load-cpu]=$(awk -v s="${SUM[$other-$load-cpu]:-0}" -v r="$cpu" 'BEGIN { print s + r }')
      unit=$(cpu_unit "$load")
      echo "round $round $load: Turna/$other ${UNIT[$load]} $rate, CPU per ${unit#us/} $cpu"
    done
  done
done

echo
echo "Turna/nginx and Turna/HAProxy, mean of $ROUNDS round(s): rate and CPU per unit"
printf '%-12s %-8s %8s %8s %8s %8s\n' load unit nginx CPU haproxy CPU
for load in $LOADS; do
  row=()
  for other in nginx haproxy; do
    if [ "$other-$load" = haproxy-udp ]; then
      row+=(- -)
    else
      row+=("$(awk -v s="${SUM[$other-$load-rate]}" -v n="$ROUNDS" 'BEGIN { printf "%.2f", s / n }')"
        "$(awk -v s="${SUM[$other-$load-cpu]}" -v n="$ROUNDS" 'BEGIN { printf "%.2f", s / n }')")
    fi
  done
  printf '%-12s %-8s %8s %8s %8s %8s\n' "$load" "${UNIT[$load]}" "${row[@]}"
done
