package sqlset

// Effects holds the statements on the effects table (package effect).
type Effects struct{}
