package retrytopic

// Exported for the tests of package retrytopic_test.
const (
	HeaderErrorMessage = headerErrorMessage
	MaxErrorMessage    = maxErrorMessage
)
