#!/usr/bin/env bash
# Tests of lib.sh's background-process functions (part of `make test`, about a second):
# the record names the program from its fork through its exec, a program that exited is not
# running, a pid file of a reused pid is not taken for the recorded process, a stop takes the
# whole process group, and a zombie counts as gone.
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {
	local what="$1"; shift
	if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}
# Gone: no such process, or a zombie (this machine's init may not reap orphans at once).
gone() { ! proc_start_time "$1" > /dev/null; }

# A program that runs a while before it execs (as a wrapper script does): the record names it
# from the start, through the exec (a check of the process name right after the fork saw the
# forked shell instead, and failed at random).
cat > "$tmp/slow-exec" <<'SH'
#!/usr/bin/env bash
sleep 0.3
exec sleep 300
SH
chmod +x "$tmp/slow-exec"
pid="$(daemon_start "$tmp/wrapped.pid" "$tmp/wrapped.log" "$tmp/slow-exec")"
check "a wrapper is recorded at once" test "$(daemon_pid "$tmp/wrapped.pid")" == "$pid"
check "it runs in a session of its own" test "$(ps -o sid= -p "$pid" | tr -d ' ')" == "$pid"
sleep 0.5
check "the record still names it after its exec" test "$(daemon_pid "$tmp/wrapped.pid")" == "$pid"
check "and it is the program now" test "$(readlink "/proc/$pid/exe")" == "$(readlink -f "$(command -v sleep)")"
daemon_stop "$tmp/wrapped.pid" wrapper 2> /dev/null
check "stop ends it and removes the pid file" bash -c "[[ ! -e $tmp/wrapped.pid ]]"
check "it is gone" gone "$pid"

# A program that exits at once is not running for long: daemon_pid says so.
pid="$(daemon_start "$tmp/never.pid" "$tmp/never.log" false)" || true
sleep 0.2
check "a program that exited is not running" bash -c "! (source $(dirname "${BASH_SOURCE[0]}")/lib.sh; daemon_pid $tmp/never.pid)"

# A pid file naming a live process with another start time (pid reuse) is not that process.
echo "$$ 1" > "$tmp/reused.pid"
check "a reused pid is not the recorded process" bash -c "! (source $(dirname "${BASH_SOURCE[0]}")/lib.sh; daemon_pid $tmp/reused.pid)"
daemon_stop "$tmp/reused.pid" reused 2> /dev/null
check "stop leaves a process with a reused pid alone" kill -0 $$

# Children of the daemon go with it.
pid="$(daemon_start "$tmp/tree.pid" "$tmp/tree.log" bash -c 'sleep 300 & sleep 300 & wait')"
sleep 0.2
children="$(pgrep -s "$pid" | grep -vx "$pid" | tr '\n' ' ' || true)"
check "the daemon has children" test -n "$children"
daemon_stop "$tmp/tree.pid" tree 2> /dev/null
sleep 0.1
for c in $children; do check "child $c stopped with the daemon" gone "$c"; done

# A zombie (exited, not reaped by its parent) is gone.
bash -c 'exec sleep 0' &
zombie=$!
sleep 0.2
check "a zombie has no start time" bash -c "! (source $(dirname "${BASH_SOURCE[0]}")/lib.sh; proc_start_time $zombie)"
wait "$zombie" || true

if ((failures > 0)); then echo "$failures failed"; exit 1; fi
echo "all passed"
