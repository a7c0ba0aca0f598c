package sqlset

// DeadLetters holds the statements on the dead_letters table (package dlq).
type DeadLetters struct{}
