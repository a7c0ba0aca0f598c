package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/checks"
)

// Stripe verifies and signs Stripe webhooks:
//
//	Stripe-Signature: t=1492774577,v1=<hex HMAC-SHA256 of "t.body">[,v1=…][,v0=…]
//
// The endpoint secret ("whsec_…") is used as the HMAC key as it is (Stripe
// does not decode it). Several v1 entries are allowed (Stripe sends one per
// active secret while a secret is rolled); other schemes are ignored. The
// timestamp must be within the tolerance (default 300 s) in both directions.
// The delivery id is the event id, the "id" field of the JSON body (a
// redelivered event keeps it), and Event its "type". Safe for concurrent
// use.
type Stripe struct {
	secrets   [][]byte
	tolerance time.Duration
}

// StripeConfig configures [NewStripe].
type StripeConfig struct {
	// Secrets are endpoint signing secrets; the first signs. Required.
	Secrets []string
	// Tolerance is the allowed |now − t|. Defaults to 300 seconds.
	Tolerance time.Duration
}

// NewStripe returns a Stripe verifier and signer.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	if len(cfg.Secrets) == 0 {
		return nil, checks.Optionf("webhook: Stripe needs at least one secret")
	}
	s := &Stripe{tolerance: cfg.Tolerance}
	if s.tolerance == 0 {
		s.tolerance = 300 * time.Second
	}
	if s.tolerance < 0 {
		return nil, checks.Optionf("webhook: negative tolerance")
	}
	for i, sec := range cfg.Secrets {
		if sec == "" {
			return nil, checks.Optionf("webhook: Stripe secret %d is empty", i)
		}
		s.secrets = append(s.secrets, []byte(sec))
	}
	return s, nil
}

func stripeMAC(key []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// parseStripeSignature parses a Stripe-Signature value into its timestamp
// text and decoded v1 signatures. It fails (ErrMalformedHeader) on entries
// without "=", a missing or repeated t, a non-numeric t, a v1 that is not
// 64 lowercase hex digits (as Stripe sends it: one accepted spelling per
// MAC), or no v1 at all. Unknown keys are ignored.
func parseStripeSignature(h string) (ts string, sigs [][]byte, err error) {
	seenT := false
	for _, item := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || k == "" {
			return "", nil, fmt.Errorf("%w: Stripe-Signature item %q", ErrMalformedHeader, item)
		}
		switch k {
		case "t":
			if seenT {
				return "", nil, fmt.Errorf("%w: Stripe-Signature has two t", ErrMalformedHeader)
			}
			if _, err := parseUnix(v); err != nil {
				return "", nil, err
			}
			seenT, ts = true, v
		case "v1":
			raw, ok := decodeMAC(v)
			if !ok {
				return "", nil, fmt.Errorf("%w: Stripe-Signature v1 is not 64 lowercase hex digits", ErrMalformedHeader)
			}
			sigs = append(sigs, raw)
		}
	}
	if !seenT || len(sigs) == 0 {
		return "", nil, fmt.Errorf("%w: Stripe-Signature needs t and v1", ErrMalformedHeader)
	}
	return ts, sigs, nil
}

// Verify implements [Verifier].
func (s *Stripe) Verify(r *http.Request, body []byte, now time.Time) (Delivery, error) {
	h, ok, err := single(r.Header, "Stripe-Signature")
	if err != nil {
		return Delivery{}, err
	}
	if !ok {
		return Delivery{}, ErrMissingSignature
	}
	tsText, sigs, err := parseStripeSignature(h)
	if err != nil {
		return Delivery{}, err
	}
	if !anyMatch(s.secrets, sigs, func(k []byte) []byte { return stripeMAC(k, tsText, body) }) {
		return Delivery{}, ErrSignatureMismatch
	}
	ts, _ := parseUnix(tsText)
	if err := checkTolerance(ts, now, s.tolerance); err != nil {
		return Delivery{}, err
	}
	var ev struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
		return Delivery{}, fmt.Errorf("%w: no event id in the body", ErrMissingDeliveryID)
	}
	return Delivery{ID: ev.ID, Timestamp: ts, Event: ev.Type}, nil
}

// Sign implements [Signer]: Stripe-Signature with t = d.Timestamp (now when
// zero) and one v1 per configured secret. The event id lives in the body.
func (s *Stripe) Sign(h http.Header, d Delivery, body []byte) error {
	ts := d.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	tsText := strconv.FormatInt(ts.Unix(), 10)
	parts := []string{"t=" + tsText}
	for _, k := range s.secrets {
		parts = append(parts, "v1="+hex.EncodeToString(stripeMAC(k, tsText, body)))
	}
	h.Set("Stripe-Signature", strings.Join(parts, ","))
	return nil
}
