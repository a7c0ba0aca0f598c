package bench

// Pairs returns the pairs this run measures, in order: the store-level
// pairs on SQLite (and PostgreSQL when configured), then the broker-level
// pairs on the run's main store, then the peer pairs.
func (e *Env) Pairs() []Pair {
	var ps []Pair
	for _, w := range []int{1, 8} {
		ps = append(ps, inboxVsPlain(e, e.sqlite, "sqlite", w))
		if e.hasPostgres() {
			ps = append(ps, inboxVsPlain(e, e.pg, "postgres", w))
		}
	}
	ps = append(ps, inboxBatchVsSingle(e, e.sqlite, "sqlite"))
	if e.hasPostgres() {
		ps = append(ps, inboxBatchVsSingle(e, e.pg, "postgres"))
	}
	return ps
}
