package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// Standard verifies and signs Standard Webhooks (standardwebhooks.com):
//
//	webhook-id:        msg_2KWPBgLlAfxdpx2AI54pPJ85f4W
//	webhook-timestamp: 1674087231            (Unix seconds)
//	webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body"> [v1,… …]
//
// The secret is "whsec_" followed by the base64 of the key. Several
// secrets may be configured for rotation: a delivery passes when any v1
// signature in the space-separated list matches any secret; other versions
// (v1a, …) are ignored. Ids and timestamps containing "." are rejected (they
// would make the signed content ambiguous). A Standard is safe for concurrent
// use.
type Standard struct {
	keys      [][]byte
	tolerance time.Duration
}

// StandardConfig configures [NewStandard].
type StandardConfig struct {
	// Secrets are whsec_-prefixed (or bare) base64 secrets; the first signs.
	// At least one is required.
	Secrets []string
	// Tolerance is the allowed |now − webhook-timestamp|. Defaults to
	// DefaultTolerance (5 minutes).
	Tolerance time.Duration
}

// NewStandard returns a Standard Webhooks verifier and signer.
func NewStandard(cfg StandardConfig) (*Standard, error) {
	if len(cfg.Secrets) == 0 {
		return nil, idem.InvalidOptionf("webhook: Standard needs at least one secret")
	}
	s := &Standard{tolerance: cfg.Tolerance}
	if s.tolerance == 0 {
		s.tolerance = DefaultTolerance
	}
	if s.tolerance < 0 {
		return nil, idem.InvalidOptionf("webhook: negative tolerance")
	}
	for i, sec := range cfg.Secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, "whsec_"))
		if err != nil || len(key) == 0 {
			return nil, idem.InvalidOptionf("webhook: Standard secret %d is not whsec_<base64>", i)
		}
		s.keys = append(s.keys, key)
	}
	return s, nil
}

func standardMAC(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify implements [Verifier].
func (s *Standard) Verify(r *http.Request, body []byte, now time.Time) (Delivery, error) {
	id, hasID, err := single(r.Header, "webhook-id")
	if err != nil {
		return Delivery{}, err
	}
	tsText, hasTS, err := single(r.Header, "webhook-timestamp")
	if err != nil {
		return Delivery{}, err
	}
	sigs, hasSig, err := single(r.Header, "webhook-signature")
	if err != nil {
		return Delivery{}, err
	}
	if !hasSig {
		return Delivery{}, ErrMissingSignature
	}
	if !hasTS {
		return Delivery{}, fmt.Errorf("%w: no webhook-timestamp", ErrMalformedHeader)
	}
	if strings.Contains(id, ".") {
		return Delivery{}, fmt.Errorf("%w: webhook-id contains '.'", ErrMalformedHeader)
	}
	ts, err := parseUnix(tsText)
	if err != nil {
		return Delivery{}, err
	}
	candidates, err := ParseStandardSignatures(sigs)
	if err != nil {
		return Delivery{}, err
	}
	// Signature before the timestamp: an unauthenticated caller learns
	// nothing about our clock.
	if !anyMatch(s.keys, candidates, func(key []byte) []byte { return standardMAC(key, id, tsText, body) }) {
		return Delivery{}, ErrSignatureMismatch
	}
	if err := checkTolerance(ts, now, s.tolerance); err != nil {
		return Delivery{}, err
	}
	if !hasID || id == "" {
		return Delivery{}, ErrMissingDeliveryID
	}
	return Delivery{ID: id, Timestamp: ts}, nil
}

// ParseStandardSignatures parses a webhook-signature header value: a
// space-separated list of "version,base64" entries. It returns the decoded
// v1 signatures (other versions are skipped) or an error wrapping
// ErrMalformedHeader when an entry is malformed or no v1 entry is present.
func ParseStandardSignatures(h string) ([][]byte, error) {
	var out [][]byte
	for _, entry := range strings.Split(h, " ") {
		if entry == "" {
			continue
		}
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version == "" || sig == "" {
			return nil, fmt.Errorf("%w: webhook-signature entry %q", ErrMalformedHeader, entry)
		}
		if version != "v1" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("%w: webhook-signature v1 is not a base64 SHA-256 MAC", ErrMalformedHeader)
		}
		out = append(out, raw)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no v1 signature in webhook-signature", ErrMalformedHeader)
	}
	return out, nil
}

// Sign implements [Signer]: it sets webhook-id (d.ID), webhook-timestamp
// (d.Timestamp, or now when zero) and webhook-signature with one v1 entry
// per configured secret.
func (s *Standard) Sign(h http.Header, d Delivery, body []byte) error {
	if d.ID == "" || strings.Contains(d.ID, ".") {
		return fmt.Errorf("webhook: Standard id %q must be non-empty and contain no '.'", d.ID)
	}
	ts := d.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	tsText := strconv.FormatInt(ts.Unix(), 10)
	sigs := make([]string, len(s.keys))
	for i, k := range s.keys {
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(standardMAC(k, d.ID, tsText, body))
	}
	h.Set("webhook-id", d.ID)
	h.Set("webhook-timestamp", tsText)
	h.Set("webhook-signature", strings.Join(sigs, " "))
	return nil
}

// anyMatch reports whether any candidate equals mac(key) for any key, in
// constant time per comparison (every pair is compared).
func anyMatch(keys [][]byte, candidates [][]byte, mac func(key []byte) []byte) bool {
	ok := false
	for _, k := range keys {
		want := mac(k)
		for _, c := range candidates {
			if hmac.Equal(want, c) {
				ok = true
			}
		}
	}
	return ok
}
