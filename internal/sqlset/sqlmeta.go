package sqlset

// SQLMeta holds the statements on the database's own catalogue that the
// operator-facing packages share through internal/sqlmeta: does one of
// idem's tables exist yet (its migration may not be applied), and roughly
// how many rows does it hold.
type SQLMeta struct {
	// TableExists returns one row, one column: the number (0 or 1) of
	// tables named $1, an idem table's qualified name as
	// store.Driver.Table returns it ("idem".inbox, idem_inbox).
	TableExists string
	// EstimateRows returns one row, one column (float8): the planner's row
	// estimate of the table named $1 (qualified, as for TableExists),
	// negative when the table was never analysed. Empty where the dialect
	// keeps no estimate (SQLite): the caller counts the rows exactly.
	EstimateRows string
}
