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
server_ticks() {
	local sum=0 p t
	for p in $(pgrep -x postgres || true); do
		t=$(awk '{print $14+$15+$16+$17}' "/proc/$p/stat" 2>/dev/null) || continue
		sum=$((sum + t))
	done
	echo "$sum"
}
before=$(server_ticks)
"$@" >&2
after=$(server_ticks)
# times (a builtin: run in this shell, not a subshell, which would report
# no children): this shell's user and system time, then its children's.
tf=$(mktemp)
times > "$tf"
read -r cu cs < <(sed -n 2p "$tf" | sed -E 's/([0-9]+)m([0-9.]+)s/\1 \2/g' | awk '{printf "%.3f %.3f\n", $1*60+$2, $3*60+$4}')
rm -f "$tf"
awk -v cu="$cu" -v cs="$cs" -v st=$((after - before)) -v tick="$tick" -v ops="$ops" \
	'BEGIN {printf "client_us_per_op=%d server_us_per_op=%d\n", (cu+cs)*1e6/ops, st*1e6/tick/ops}'
