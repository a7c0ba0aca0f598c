#!/usr/bin/env bash
# Where the CPU of a benchmark goes, client against database server: runs a
# command (a Go benchmark with a fixed -benchtime Nx, say) and prints its own
# CPU time and the PostgreSQL server's (every postgres process on this
# machine, reaped children included), each divided by OPS. The server's share
# includes whatever else it ran meanwhile: use an otherwise idle machine.
# Usage: ./split.sh OPS command [args...]
# e.g.  ./split.sh 20000 go test -run '^$' -bench 'BenchmarkHandlerPlainTx$/parallel' -benchtime 20000x ./idemhttp/
#       (build the test binary first, or its compile time is counted: go test -c, then run the binary)
set -euo pipefail
ops=$1
shift
tick=$(getconf CLK_TCK)
# shellcheck source=server_ticks.sh
. "$(dirname "$0")/server_ticks.sh"
# times (a builtin: run in this shell, not a subshell, which would report
# no children) prints this shell's user and system time, then its
# children's; read before and after the command, so the /proc reads of
# server_ticks (children too) are not counted as the command's.
children() {
	sed -n 2p "$1" | sed -E 's/([0-9]+)m([0-9.]+)s/\1 \2/g' | awk '{printf "%.3f\n", $1*60+$2+$3*60+$4}'
}
t0=$(mktemp) t1=$(mktemp)
trap 'rm -f "$t0" "$t1"' EXIT
before=$(server_ticks)
times > "$t0"
"$@" >&2
times > "$t1"
after=$(server_ticks)
awk -v c0="$(children "$t0")" -v c1="$(children "$t1")" -v st=$((after - before)) -v tick="$tick" -v ops="$ops" \
	'BEGIN {printf "client_us_per_op=%d server_us_per_op=%d\n", (c1-c0)*1e6/ops, st*1e6/tick/ops}'
