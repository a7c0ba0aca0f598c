package sqlset

// Outbox holds the statements on the outbox table (package outbox).
type Outbox struct{}
