package sqlset

// HTTPKeys holds the statements on the idempotency_keys table (package idemhttp).
type HTTPKeys struct{}
