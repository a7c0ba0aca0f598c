package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/problem"
)

// Problem type URIs, one per error, stable across releases. Each points at
// its own documentation.
const (
	problemBase = "https://pkg.go.dev/github.com/idemkit/idem/idemhttp#"

	// TypeKeyMissing: POST/PATCH without an Idempotency-Key (400).
	TypeKeyMissing = problemBase + "TypeKeyMissing"
	// TypeKeyInvalid: malformed key or several Idempotency-Key headers (400).
	TypeKeyInvalid = problemBase + "TypeKeyInvalid"
	// TypeUnauthorized: Config.Tenant returned an error, or a tenant that
	// is not storable text: NUL, invalid UTF-8, or longer than
	// MaxTenantLen bytes (401).
	TypeUnauthorized = problemBase + "TypeUnauthorized"
	// TypeOperationInvalid: the operation (Config.Operation, or the
	// method and path by default) is not storable text: NUL, invalid
	// UTF-8, or longer than MaxOperationLen bytes (400).
	TypeOperationInvalid = problemBase + "TypeOperationInvalid"
	// TypeResponseTooLarge: the handler's response body exceeded
	// Config.MaxResponseBytes; nothing was recorded (500).
	TypeResponseTooLarge = problemBase + "TypeResponseTooLarge"
	// TypeBodyTooLarge: request body above Config.MaxBodyBytes (413).
	TypeBodyTooLarge = problemBase + "TypeBodyTooLarge"
	// TypeBodyUnreadable: the request body could not be read (400).
	TypeBodyUnreadable = problemBase + "TypeBodyUnreadable"
	// TypeKeyReused: same key, different request fingerprint (422); the
	// handler did not run.
	TypeKeyReused = problemBase + "TypeKeyReused"
	// TypeInFlight: a request with the same key is still executing (409,
	// with Retry-After).
	TypeInFlight = problemBase + "TypeInFlight"
	// TypeLeaseLost: two-phase only; this execution's lease expired and
	// another request took the key over, so its result was not recorded
	// (409, with Retry-After; the retry replays the new owner's response).
	TypeLeaseLost = problemBase + "TypeLeaseLost"
	// TypeNeedsReconciliation: two-phase Hold policy; an execution was
	// abandoned and an operator must resolve the key (409).
	TypeNeedsReconciliation = problemBase + "TypeNeedsReconciliation"
	// TypeStoreUnavailable: the key store failed, or the commit failed; if
	// the commit failed nothing was recorded (503, with Retry-After).
	TypeStoreUnavailable = problemBase + "TypeStoreUnavailable"
)

// Errors of the middleware not shared with the root package. Key reuse,
// in-flight, lease-lost and reconciliation problems unwrap to
// idem.ErrFingerprintMismatch, idem.ErrInProgress, idem.ErrLeaseLost and
// idem.ErrNeedsReconciliation.
var (
	// ErrUnauthorized reports that Config.Tenant rejected the request, or
	// returned a tenant that is not storable text.
	ErrUnauthorized = errors.New("idemhttp: tenant unknown")
	// ErrBodyTooLarge reports a request body above Config.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("idemhttp: request body too large")
	// ErrOperationInvalid reports an operation that is not storable text.
	ErrOperationInvalid = fmt.Errorf("%w: invalid operation", idem.ErrInvalidInput)
	// ErrResponseTooLarge is returned by the handler's Write once its
	// response body exceeds Config.MaxResponseBytes.
	ErrResponseTooLarge = errors.New("idemhttp: response body too large")
	// ErrStoreUnavailable reports a failure of the key store.
	ErrStoreUnavailable = errors.New("idemhttp: key store unavailable")
)

// Problem is an RFC 9457 problem detail produced by the middleware. It
// implements error and unwraps to the sentinel it stands for, so an
// ErrorHandler can branch with errors.Is.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Key is the idempotency key concerned, when one was parsed.
	Key string `json:"idempotency_key,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
	// Err is the underlying error (a sentinel of this package or of idem).
	Err error `json:"-"`
}

// Error implements error.
func (p *Problem) Error() string {
	s := strconv.Itoa(p.Status) + " " + p.Title
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

// Unwrap returns the underlying error.
func (p *Problem) Unwrap() error { return p.Err }

// WriteProblem is the default Config.ErrorHandler: it writes p as
// application/problem+json with its status and, when set, Retry-After.
func WriteProblem(w http.ResponseWriter, _ *http.Request, p *Problem) {
	problem.Write(w, p.Status, p, p.RetryAfter)
}

func problemFor(err error, key string, retryAfter time.Duration, detail string) *Problem {
	p := &Problem{Err: err, Key: key, Detail: detail}
	switch {
	case errors.Is(err, ErrKeyMissing):
		p.Type, p.Title, p.Status = TypeKeyMissing, "Idempotency-Key header is required", http.StatusBadRequest
	case errors.Is(err, ErrKeyInvalid):
		p.Type, p.Title, p.Status = TypeKeyInvalid, "Idempotency-Key header is malformed", http.StatusBadRequest
	case errors.Is(err, ErrUnauthorized):
		p.Type, p.Title, p.Status = TypeUnauthorized, "Request is not authorised", http.StatusUnauthorized
	case errors.Is(err, ErrOperationInvalid):
		p.Type, p.Title, p.Status = TypeOperationInvalid, "Operation is not valid text", http.StatusBadRequest
	case errors.Is(err, ErrResponseTooLarge):
		p.Type, p.Title, p.Status = TypeResponseTooLarge, "Response too large to record", http.StatusInternalServerError
	case errors.Is(err, ErrBodyTooLarge):
		p.Type, p.Title, p.Status = TypeBodyTooLarge, "Request body too large", http.StatusRequestEntityTooLarge
	case errors.Is(err, idem.ErrFingerprintMismatch):
		p.Type, p.Title, p.Status = TypeKeyReused, "Idempotency-Key reused with a different request", http.StatusUnprocessableEntity
	case errors.Is(err, idem.ErrInProgress):
		p.Type, p.Title, p.Status = TypeInFlight, "A request with this Idempotency-Key is in progress", http.StatusConflict
		p.RetryAfter = retryAfter
	case errors.Is(err, idem.ErrLeaseLost):
		p.Type, p.Title, p.Status = TypeLeaseLost, "This execution lost its lease; the key was taken over", http.StatusConflict
		p.RetryAfter = retryAfter
	case errors.Is(err, idem.ErrNeedsReconciliation):
		p.Type, p.Title, p.Status = TypeNeedsReconciliation, "This Idempotency-Key needs reconciliation by an operator", http.StatusConflict
	case errors.Is(err, ErrStoreUnavailable):
		p.Type, p.Title, p.Status = TypeStoreUnavailable, "Idempotency key store unavailable", http.StatusServiceUnavailable
		p.RetryAfter = retryAfter
	default:
		p.Type, p.Title, p.Status = TypeBodyUnreadable, "Request body could not be read", http.StatusBadRequest
	}
	return p
}
