# Sourced by cpu.sh and split.sh: server_ticks prints the CPU time, in clock
# ticks, of every postgres process on this machine (user and system, the
# postmaster's reaped children included).
server_ticks() {
	local sum=0 p t
	for p in $(pgrep -x postgres || true); do
		t=$(awk '{print $14+$15+$16+$17}' "/proc/$p/stat" 2>/dev/null) || continue
		sum=$((sum + t))
	done
	echo "$sum"
}
