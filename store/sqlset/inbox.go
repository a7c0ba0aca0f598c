package sqlset

// Inbox holds the statements on the inbox table (package inbox).
type Inbox struct{}
