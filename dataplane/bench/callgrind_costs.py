#!/usr/bin/env python3
"""Where a callgrind profile's cost goes, per request.

callgrind_annotate 3.19 attributes the whole self cost of the profiles `callgrind.sh` keeps
(`KEEP=dir`, dumped with `callgrind_control -d` after `-z`) to `__libc_start_main`, so this reads
the files itself. Build the proxy with line tables for names and lines:

    CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_TARGET_DIR=/tmp/tgt-prof \\
      cargo build --release -p turna-dataplane --example serve
    TURNA_SERVE=/tmp/tgt-prof/release/examples/serve ONLY=turna KEEP=/tmp/cg \\
      VALGRIND_OPTS=--cache-sim=yes dataplane/bench/callgrind.sh

    callgrind_costs.py /tmp/cg/turna.c64                    # self cost per function
    callgrind_costs.py /tmp/cg/turna.c64 --event I1mr       # instruction-cache misses instead
    callgrind_costs.py /tmp/cg/turna.c64 --lines forward_to # per source line of functions matching
    callgrind_costs.py /tmp/cg/turna.c64 --callers memcpy   # who calls functions matching, how often

Figures are divided by --requests (callgrind.sh's REQUESTS, default 5000).
"""

import argparse
import collections
import re
import sys

COMPRESSED = re.compile(r"\((\d+)\)(?: (.*))?")


class Profile:
    """The cost lines of one callgrind file, with compressed names resolved."""

    def __init__(self, path, event):
        self.functions = collections.Counter()
        self.lines = collections.Counter()
        self.callers = collections.Counter()
        self.calls = collections.Counter()
        names, files = {}, {}
        column = None
        function = file = inlined = callee = None
        line = 0
        pending_calls = None
        with open(path) as text:
            for raw in text:
                raw = raw.rstrip("\n")
                if raw.startswith("events:"):
                    events = raw.split()[1:]
                    if event not in events:
                        sys.exit(f"no event {event} in {path} (has {' '.join(events)})")
                    column = events.index(event) + 1
                elif raw.startswith("fl="):
                    file, inlined = resolve(raw[3:], files), None
                elif raw.startswith(("fi=", "fe=")):
                    inlined = resolve(raw[3:], files)
                elif raw.startswith("fn="):
                    function, inlined = resolve(raw[3:], names), None
                elif raw.startswith("cfn="):
                    callee = resolve(raw[4:], names)
                elif raw.startswith(("cfi=", "cfl=")):
                    resolve(raw[4:], files)
                elif raw.startswith("calls="):
                    pending_calls = int(raw[6:].split()[0])
                elif raw and (raw[0].isdigit() or raw[0] in "+-*"):
                    fields = raw.split()
                    line = position(fields[0], line)
                    cost = int(fields[column]) if column is not None and len(fields) > column else 0
                    where = ((inlined or file or "?").rsplit("/", 1)[-1], line)
                    if pending_calls is not None:
                        # The line after `calls=` is the call's inclusive cost, not self cost.
                        self.callers[(callee, function, where)] += cost
                        self.calls[(callee, function, where)] += pending_calls
                        pending_calls = None
                    elif function:
                        self.functions[function] += cost
                        self.lines[(function, where)] += cost


def resolve(text, table):
    match = COMPRESSED.match(text)
    if not match:
        return text
    if match.group(2):
        table[match.group(1)] = match.group(2)
    return table.get(match.group(1), text)


def position(field, last):
    if field == "*":
        return last
    if field[0] in "+-":
        return last + int(field)
    return int(field)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--event", default="Ir", help="Ir (instructions), I1mr, D1mr, Dw, ...")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--lines", metavar="FUNCTION", help="self cost per line of matching functions")
    parser.add_argument("--callers", metavar="FUNCTION", help="callers of matching functions")
    args = parser.parse_args()
    profile = Profile(args.profile, args.event)
    n = args.requests
    if args.lines:
        pattern = re.compile(args.lines)
        costs = collections.Counter()
        for (function, where), cost in profile.lines.items():
            if pattern.search(function):
                costs[where] += cost
        for (file, line), cost in costs.most_common(args.top):
            print(f"{cost / n:9.1f}  {file}:{line}")
    elif args.callers:
        pattern = re.compile(args.callers)
        for (callee, caller, (file, line)), cost in profile.callers.most_common():
            if callee and pattern.search(callee) and args.top > 0:
                args.top -= 1
                calls = profile.calls[(callee, caller, (file, line))] / n
                print(f"{cost / n:9.1f}  {calls:5.2f} calls  {caller[:100]} ({file}:{line}) -> {callee[:40]}")
    else:
        print(f"{sum(profile.functions.values()) / n:9.1f}  total {args.event} per request")
        for function, cost in profile.functions.most_common(args.top):
            print(f"{cost / n:9.1f}  {function[:150]}")


if __name__ == "__main__":
    main()
