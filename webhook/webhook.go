// Package webhook receives webhooks once: it authenticates each delivery on
// its raw body, then records it and enqueues its work in one transaction,
// deduplicated on (source, delivery id) through the inbox, so a sender's
// replays are answered 2xx and enqueue nothing. (The webhook-replay scenario
// of `idem drill` shows exactly that against a running system: one delivery
// replayed many times, sequentially and concurrently, pays once, and a
// forged one gets 401.)
//
//	verifier, err := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{secret}}) // or NewGitHub, NewStripe
//	ib, err := inbox.New(d, inbox.Config{})
//	receiver, err := webhook.NewReceiver(d, ib, webhook.ReceiverConfig[pgx.Tx]{
//		Source:   "billing", // dedup scope: (source, delivery id)
//		Verifier: verifier,
//		EnqueueTx: func(ctx context.Context, tx pgx.Tx, del webhook.Delivery, body []byte) error {
//			_, err := tx.Exec(ctx, `INSERT INTO jobs (delivery_id, body) VALUES ($1, $2)`, del.ID, body)
//			return err // commits with the delivery's inbox record, or neither does
//		},
//	})
//	mux.Handle("POST /webhooks/billing", receiver) // a replay answers 2xx and enqueues nothing; a forgery 401
//
// Verifiers (all check signatures over the exact bytes received, never a
// re-encoded body; HMACs are compared in constant time with [hmac.Equal],
// Ed25519 signatures checked with crypto/ed25519):
//
//   - [Standard]: Standard Webhooks (webhook-id, webhook-timestamp,
//     webhook-signature "v1,<base64>" / "v1a,<base64>", or the svix-*
//     names of the same headers): v1 HMAC-SHA256 with whsec_ secrets, v1a
//     Ed25519 with whpk_ public keys, rotation.
//   - [GitHub]: X-Hub-Signature-256 "sha256=<hex>", X-GitHub-Delivery.
//   - [Stripe]: Stripe-Signature "t=…,v1=…", the event id from the body.
//   - any custom scheme implementing [Verifier].
//
// Signatures are decoded strictly: only the canonical spelling is accepted
// (standard base64 with zero padding bits and no line breaks; lowercase hex
// of exactly 64 digits), so each signature has exactly one accepted text.
// The Standard Webhooks and Svix libraries refuse the same v1 variants
// (they compare v1 signatures as canonical base64 text); for hex idem is
// stricter than stripe-go, which also takes uppercase, though neither
// Stripe nor GitHub sends it. Signed
// timestamps (Standard, Stripe) are decimal Unix seconds and must be within
// the tolerance (default 5 minutes) in both directions.
//
// Each scheme also has a signer ([Signer]) for tests and for senders.
//
// [Receiver] is the http.Handler: body limit (413), verification first
// (401, nothing recorded), delivery id required (400), then the inbox and
// the caller's Enqueue in one transaction; 202 for a new delivery, 200 for a
// replay.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"time"
)

// Delivery is an authenticated webhook delivery.
type Delivery struct {
	// Source names the sender, as configured on the Receiver ("github").
	Source string
	// ID is the sender's delivery id (webhook-id, X-GitHub-Delivery, the
	// Stripe event id): the dedup key within Source. A replay of one
	// delivery carries the same ID.
	ID string
	// Timestamp is the signed send time; zero for schemes without one
	// (GitHub).
	Timestamp time.Time
	// Event is the event type when the scheme carries it (X-GitHub-Event,
	// the Stripe body's "type"), else "".
	Event string
}

// Verifier authenticates a delivery. Verify is called with the request,
// the raw body exactly as received and the current time; it returns the
// delivery's identity or an error. Errors that mean "not authentic" should
// wrap [ErrUnauthenticated] (the Receiver answers 401); a delivery that is
// authentic but carries no id should return [ErrMissingDeliveryID] (400).
// Implementations must be safe for concurrent use and compare secrets in
// constant time.
type Verifier interface {
	Verify(r *http.Request, body []byte, now time.Time) (Delivery, error)
}

// Signer signs an outgoing delivery: it sets the scheme's headers on h for
// body. Used by tests and by senders.
type Signer interface {
	Sign(h http.Header, d Delivery, body []byte) error
}

// Verification errors. All but ErrMissingDeliveryID match
// ErrUnauthenticated.
var (
	// ErrUnauthenticated is the class of every authentication failure.
	ErrUnauthenticated = errors.New("webhook: unauthenticated")
	// ErrMissingSignature: the signature header is absent.
	ErrMissingSignature = fmt.Errorf("%w: missing signature", ErrUnauthenticated)
	// ErrMalformedHeader: a signature, id or timestamp header cannot be parsed.
	ErrMalformedHeader = fmt.Errorf("%w: malformed header", ErrUnauthenticated)
	// ErrDuplicateHeader: a header that must appear once appears several
	// times, or under two names with different values (webhook-id and
	// svix-id): an attacker could hope one copy is verified and the other
	// used.
	ErrDuplicateHeader = fmt.Errorf("%w: duplicate header", ErrUnauthenticated)
	// ErrSignatureMismatch: no signature matches any configured secret or
	// key of its version.
	ErrSignatureMismatch = fmt.Errorf("%w: signature mismatch", ErrUnauthenticated)
	// ErrTimestampOutOfRange: the signed timestamp is further from now than
	// the tolerance, in either direction (a replay of an old capture, or a
	// clock far ahead).
	ErrTimestampOutOfRange = fmt.Errorf("%w: timestamp outside the tolerance", ErrUnauthenticated)
	// ErrMissingDeliveryID: the delivery is authentic but has no id to
	// deduplicate on.
	ErrMissingDeliveryID = errors.New("webhook: missing delivery id")
)

// defaultTolerance is the default allowed distance between a signed
// timestamp and now, in both directions.
const defaultTolerance = 5 * time.Minute

// single returns the only value of header name: "" with ok=false when it is
// absent, ErrDuplicateHeader when it appears more than once.
func single(h http.Header, name string) (string, bool, error) {
	vs := h[textproto.CanonicalMIMEHeaderKey(name)]
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return vs[0], true, nil
	}
	return "", false, fmt.Errorf("%w: %s", ErrDuplicateHeader, name)
}

// checkTolerance rejects ts further than tol from now.
func checkTolerance(ts, now time.Time, tol time.Duration) error {
	d := now.Sub(ts)
	if d > tol || d < -tol {
		return fmt.Errorf("%w: signed at %s, now %s, tolerance %s", ErrTimestampOutOfRange,
			ts.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), tol)
	}
	return nil
}

// hmacSHA256 is the HMAC-SHA256 of content under key: the GitHub signature
// of a body, the Standard Webhooks v1 signature of its signed content.
func hmacSHA256(key, content []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(content)
	return m.Sum(nil)
}

// decodeMAC decodes the hex text of an HMAC-SHA256: exactly 64 lowercase
// hex digits (hex.DecodeString alone would also take uppercase).
func decodeMAC(s string) ([]byte, bool) {
	if len(s) != 2*sha256.Size {
		return nil, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return nil, false
		}
	}
	raw, err := hex.DecodeString(s)
	return raw, err == nil
}

// parseUnix parses a decimal Unix timestamp in seconds: digits only, no
// sign, no dot, at most 12 digits.
func parseUnix(s string) (time.Time, error) {
	if s == "" || len(s) > 12 {
		return time.Time{}, fmt.Errorf("%w: timestamp %q", ErrMalformedHeader, s)
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return time.Time{}, fmt.Errorf("%w: timestamp %q", ErrMalformedHeader, s)
		}
		n = n*10 + int64(c-'0')
	}
	return time.Unix(n, 0), nil
}
