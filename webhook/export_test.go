package webhook

// Exported for the tests of package webhook_test.
var (
	ParseGitHubSignature    = parseGitHubSignature
	ParseStandardSignatures = parseStandardSignatures
	ParseStripeSignature    = parseStripeSignature
)

// DefaultTolerance is defaultTolerance, for the tests.
const DefaultTolerance = defaultTolerance

// MaxStandardSignatures is maxStandardSignatures, for the tests.
const MaxStandardSignatures = maxStandardSignatures
