package webhook

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/checks"
)

// GitHub verifies and signs GitHub webhooks:
//
//	X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>
//	X-GitHub-Delivery:   <GUID>   (the delivery id; a redelivery keeps it)
//	X-GitHub-Event:      <event>
//
// GitHub signs no timestamp, so an old capture verifies forever: the dedup
// on the delivery id (kept for the inbox retention) is what stops replays.
// Several secrets may be configured for rotation. Safe for concurrent use.
type GitHub struct {
	secrets [][]byte
}

// NewGitHub returns a GitHub verifier and signer for secrets (the first
// signs). At least one non-empty secret is required.
func NewGitHub(secrets ...string) (*GitHub, error) {
	if len(secrets) == 0 {
		return nil, checks.Optionf("webhook: GitHub needs at least one secret")
	}
	g := &GitHub{}
	for i, s := range secrets {
		if s == "" {
			return nil, checks.Optionf("webhook: GitHub secret %d is empty", i)
		}
		g.secrets = append(g.secrets, []byte(s))
	}
	return g, nil
}

// parseGitHubSignature parses an X-Hub-Signature-256 value "sha256=<64 hex>"
// into the raw MAC, or returns an error wrapping ErrMalformedHeader. The hex
// must be lowercase, as GitHub sends it, so a MAC has exactly one accepted
// spelling.
func parseGitHubSignature(h string) ([]byte, error) {
	hexSig, ok := strings.CutPrefix(h, "sha256=")
	raw, hexOK := decodeMAC(hexSig)
	if !ok || !hexOK {
		return nil, fmt.Errorf("%w: X-Hub-Signature-256 must be sha256=<64 lowercase hex digits>", ErrMalformedHeader)
	}
	return raw, nil
}

// Verify implements [Verifier].
func (g *GitHub) Verify(r *http.Request, body []byte, _ time.Time) (Delivery, error) {
	sig, ok, err := single(r.Header, "X-Hub-Signature-256")
	if err != nil {
		return Delivery{}, err
	}
	if !ok {
		return Delivery{}, ErrMissingSignature
	}
	id, hasID, err := single(r.Header, "X-GitHub-Delivery")
	if err != nil {
		return Delivery{}, err
	}
	event, _, err := single(r.Header, "X-GitHub-Event")
	if err != nil {
		return Delivery{}, err
	}
	raw, err := parseGitHubSignature(sig)
	if err != nil {
		return Delivery{}, err
	}
	if !anyMatch(g.secrets, [][]byte{raw}, func(k []byte) []byte { return hmacSHA256(k, body) }) {
		return Delivery{}, ErrSignatureMismatch
	}
	if !hasID || id == "" {
		return Delivery{}, ErrMissingDeliveryID
	}
	return Delivery{ID: id, Event: event}, nil
}

// Sign implements [Signer]: X-Hub-Signature-256 with the first secret,
// X-GitHub-Delivery = d.ID and X-GitHub-Event = d.Event (when set).
func (g *GitHub) Sign(h http.Header, d Delivery, body []byte) error {
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(hmacSHA256(g.secrets[0], body)))
	if d.ID != "" {
		h.Set("X-GitHub-Delivery", d.ID)
	}
	if d.Event != "" {
		h.Set("X-GitHub-Event", d.Event)
	}
	return nil
}
