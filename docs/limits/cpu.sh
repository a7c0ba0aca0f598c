#!/usr/bin/env bash
# The database server's CPU time per transaction of pgbench scripts, for a
# server on this machine: the user and system time of every postgres process
# (the postmaster's reaped children included), read from /proc before and
# after a fixed number of transactions, divided by their count. Steadier than
# tps on a shared machine, where other processes take the CPU tps depends on.
# A CHECKPOINT precedes each script, so one script's dirty pages are not
# written on the next one's time.
# Usage: ./cpu.sh URL TRANSACTIONS_PER_CLIENT script.sql...   (16 clients)
set -euo pipefail
url=$1 per=$2
shift 2
tick=$(getconf CLK_TCK)
# shellcheck source=server_ticks.sh
. "$(dirname "$0")/server_ticks.sh"
for s in "$@"; do
	psql -q "$url" -c checkpoint
	before=$(server_ticks)
	tps=$(pgbench -n -M prepared -c 16 -j 2 -t "$per" -f "$s" "$url" 2>&1 | awk '/^tps/ {print int($3)}')
	after=$(server_ticks)
	echo "$s server_us_per_tx=$(( (after - before) * 1000000 / tick / (16 * per) )) tps=$tps"
done
