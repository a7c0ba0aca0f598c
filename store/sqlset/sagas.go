package sqlset

// Sagas holds the statements on the sagas table (package saga).
type Sagas struct{}
