package sqlset

// Horizons holds the statements on the replay horizons consumers declare,
// table consumer_horizons (package inbox; migration
// 0015_consumer_horizons).
//
// Columns: consumer (the primary key), inbox_retention (how long the
// consumer's inbox keeps a message id, microseconds) and recorded_at
// (microseconds).
type Horizons struct {
	// Record stores a consumer's inbox retention, replacing the one it
	// recorded before; a longer one than before keeps the shorter in
	// prior_retention (the narrowest not yet superseded by a narrower one)
	// and sets widened_at. $1 consumer, $2 inbox_retention, $3
	// recorded_at.
	Record string
	// Get reads inbox_retention, recorded_at, prior_retention, widened_at
	// of one consumer (no row: it recorded none). $1 consumer.
	Get string
}
