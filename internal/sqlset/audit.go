package sqlset

// Audit holds the statements on the operator audit log, table audit_log
// (package console; migration 0006_audit).
//
// Columns: id (assigned by the database), at (when the action started),
// actor, action, target, reason, details, outcome ('started', then 'ok' or
// 'failed: …') and ended_at (microseconds; 0 while started).
type Audit struct {
	// List reads entries newest first (id descending): id, at, actor,
	// action, target, reason, details, outcome, ended_at. Every filter is
	// off when its argument is the zero value: $1 actor, $2 action (exact),
	// $3 and $4 an action range ($3 <= action < $4, for a prefix; off
	// when $3 is ''), $5 target, $6 outcome, $7 since (at >= $7,
	// microseconds; 0 = off), $8 before id (id < $8; 0 = off), $9 limit
	// (a huge number for none).
	List string
	// Start records an action that starts (outcome 'started'); returns
	// id. $1 at, $2 actor, $3 action, $4 target, $5 reason, $6 details.
	Start string
	// End records how entry $1 ended: $2 outcome, $3 ended_at,
	// $4 details.
	End string
}
