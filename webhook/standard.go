package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/checks"
)

// Standard verifies and signs Standard Webhooks (standardwebhooks.com):
//
//	webhook-id:        msg_2KWPBgLlAfxdpx2AI54pPJ85f4W
//	webhook-timestamp: 1674087231            (Unix seconds)
//	webhook-signature: v1,<base64> [v1a,<base64> …]
//
// Both signature versions sign the same content, "id.timestamp.body" (the
// header texts exactly as received, then the raw body):
//
//   - v1 is HMAC-SHA256 keyed with a shared secret, "whsec_" followed by the
//     base64 of the key ([StandardConfig.Secrets]);
//   - v1a is an Ed25519 signature by the sender's private key ("whsk_…"),
//     verified with its public key ("whpk_…", [StandardConfig.PublicKeys]).
//
// A v1a entry is only ever checked against public keys and a v1 entry only
// against secrets: a verifier configured with secrets alone ignores v1a
// entries, one configured with public keys alone ignores v1 entries, and a
// signature of one version is never accepted as the other. A delivery passes
// when any entry of the space-separated list matches any configured key of
// its version (several keys give rotation); other versions (v2, …) are
// skipped.
//
// Signatures are decoded strictly: only the canonical base64 spelling of a
// signature is accepted (no changed padding bits, no embedded line breaks),
// so each signature has exactly one accepted text.
//
// Svix, and every sender built on it, sends the same scheme under the names
// svix-id, svix-timestamp and svix-signature; they are accepted as aliases.
// When both names of one header are present they must carry the same value,
// otherwise the delivery is refused ([ErrDuplicateHeader]): one copy could
// be verified while the other is used.
//
// Ids and timestamps containing "." are rejected (they would make the
// signed content ambiguous). A Standard is safe for concurrent use.
type Standard struct {
	keys      [][]byte            // HMAC keys: verify and sign v1
	public    []ed25519.PublicKey // verify v1a
	private   []ed25519.PrivateKey
	tolerance time.Duration
}

// StandardConfig configures [NewStandard]. At least one of Secrets,
// PublicKeys and SigningKeys is required.
type StandardConfig struct {
	// Secrets are whsec_-prefixed (or bare) base64 HMAC secrets: v1 entries
	// are verified against each of them, and Sign emits one v1 entry per
	// secret.
	Secrets []string
	// PublicKeys are whpk_-prefixed (or bare) base64 Ed25519 public keys (32
	// bytes): v1a entries are verified against each of them.
	PublicKeys []string
	// SigningKeys are whsk_-prefixed (or bare) base64 Ed25519 private keys,
	// the 32-byte seed (as the Standard Webhooks libraries write them) or the
	// 64-byte seed‖public key. Sign emits one v1a entry per signing key, and
	// their public keys are also accepted for verification.
	SigningKeys []string
	// Tolerance is the allowed |now − webhook-timestamp|. Defaults to
	// 5 minutes.
	Tolerance time.Duration
}

// Key prefixes of the Standard Webhooks scheme.
const (
	standardSecretPrefix  = "whsec_"
	standardPublicPrefix  = "whpk_"
	standardPrivatePrefix = "whsk_"
)

// maxStandardSignatures bounds the entries of one webhook-signature header
// (of any version); a longer list is malformed. Senders send one entry per
// active key; the bound stops a forger from making the receiver run
// thousands of Ed25519 verifications over one body.
const maxStandardSignatures = 16

// NewStandard returns a Standard Webhooks verifier and signer. Secrets and
// keys must be canonical standard base64 of a non-empty key (32 bytes for
// public keys, 32 or 64 for signing keys); anything else is an
// [idem.ErrInvalidOption].
func NewStandard(cfg StandardConfig) (*Standard, error) {
	if len(cfg.Secrets)+len(cfg.PublicKeys)+len(cfg.SigningKeys) == 0 {
		return nil, checks.Optionf("webhook: Standard needs at least one secret, public key or signing key")
	}
	s := &Standard{tolerance: cfg.Tolerance}
	if s.tolerance == 0 {
		s.tolerance = defaultTolerance
	}
	if s.tolerance < 0 {
		return nil, checks.Optionf("webhook: negative tolerance")
	}
	for i, sec := range cfg.Secrets {
		key, why := decodeStandardKey(sec, standardSecretPrefix)
		if len(key) == 0 {
			return nil, checks.Optionf("webhook: Standard secret %d is not whsec_<base64>%s", i, why)
		}
		s.keys = append(s.keys, key)
	}
	for i, pk := range cfg.PublicKeys {
		key, why := decodeStandardKey(pk, standardPublicPrefix)
		if len(key) != ed25519.PublicKeySize {
			return nil, checks.Optionf("webhook: Standard public key %d is not whpk_<base64 of a 32-byte Ed25519 public key>%s", i, why)
		}
		if smallOrder(key) {
			return nil, checks.Optionf("webhook: Standard public key %d is a point of small order: anyone could forge v1a signatures for it", i)
		}
		s.public = append(s.public, ed25519.PublicKey(key))
	}
	for i, sk := range cfg.SigningKeys {
		key, why := decodeStandardKey(sk, standardPrivatePrefix)
		var priv ed25519.PrivateKey
		switch {
		case len(key) == ed25519.SeedSize:
			priv = ed25519.NewKeyFromSeed(key)
		case len(key) == ed25519.PrivateKeySize:
			priv = ed25519.NewKeyFromSeed(key[:ed25519.SeedSize])
			if !hmac.Equal(priv, key) {
				return nil, checks.Optionf("webhook: Standard signing key %d: its public half does not belong to its seed", i)
			}
		}
		if priv == nil {
			return nil, checks.Optionf("webhook: Standard signing key %d is not whsk_<base64 of a 32-byte Ed25519 seed>%s", i, why)
		}
		s.private = append(s.private, priv)
		s.public = append(s.public, priv.Public().(ed25519.PublicKey))
	}
	return s, nil
}

// smallOrder reports whether pk is an Ed25519 point of small order (1, 2, 4
// or 8), such as the all-zero placeholder key. Under such a key anyone can
// forge: the signature (R = identity, S = 0) verifies for every message
// whose hash is a multiple of the point's order, one in eight at worst. It
// probes 256 fixed messages, so a small-order key escapes with probability
// below (7/8)^256 ≈ 1e-15; a genuine key never fails (that would take a
// hash that is a multiple of the group order).
func smallOrder(pk ed25519.PublicKey) bool {
	forgery := make([]byte, ed25519.SignatureSize)
	forgery[0] = 1 // the identity point's encoding, then S = 0
	for i := range 256 {
		if ed25519.Verify(pk, []byte{byte(i)}, forgery) {
			return true
		}
	}
	return false
}

// decodeStandardKey strips prefix and decodes the rest as canonical
// standard base64. A key carrying another Standard Webhooks prefix (a whsk_
// signing key among the public keys, …) is refused by name.
// It returns the key, or nil and why it is refused (for the error text,
// which never includes the key itself).
func decodeStandardKey(s, prefix string) ([]byte, string) {
	for _, p := range []string{standardSecretPrefix, standardPublicPrefix, standardPrivatePrefix} {
		if p != prefix && strings.HasPrefix(s, p) {
			return nil, " (it is a " + p + "… key)"
		}
	}
	key, ok := decodeBase64(strings.TrimPrefix(s, prefix))
	if !ok {
		return nil, " (not canonical standard base64)"
	}
	return key, ""
}

// decodeBase64 decodes the one canonical standard base64 spelling of some
// bytes: padded, zero padding bits (Strict) and no CR or LF, which even the
// strict decoder skips.
func decodeBase64(s string) ([]byte, bool) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, false
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	return b, err == nil
}

// GenerateStandardKeyPair returns a new Ed25519 key pair for v1a
// signatures: the signing key "whsk_<base64 seed>" for the sender's
// [StandardConfig.SigningKeys] and the public key "whpk_<base64>" for the
// receivers' [StandardConfig.PublicKeys]. rand defaults to crypto/rand when
// nil.
func GenerateStandardKeyPair(random io.Reader) (signingKey, publicKey string, err error) {
	if random == nil {
		random = rand.Reader
	}
	pub, priv, err := ed25519.GenerateKey(random)
	if err != nil {
		return "", "", fmt.Errorf("webhook: generate an Ed25519 key: %w", err)
	}
	return standardPrivatePrefix + base64.StdEncoding.EncodeToString(priv.Seed()),
		standardPublicPrefix + base64.StdEncoding.EncodeToString(pub), nil
}

// standardContent is the signed content of both versions: "id.ts.body".
func standardContent(id, ts string, body []byte) []byte {
	b := make([]byte, 0, len(id)+len(ts)+2+len(body))
	b = append(b, id...)
	b = append(b, '.')
	b = append(b, ts...)
	b = append(b, '.')
	return append(b, body...)
}

// standardHeader returns the value of the Standard Webhooks header
// "webhook-"+name or of its Svix alias "svix-"+name. Each must appear at
// most once; when both appear they must be equal, else ErrDuplicateHeader.
func standardHeader(h http.Header, name string) (string, bool, error) {
	v, ok, err := single(h, "webhook-"+name)
	if err != nil {
		return "", false, err
	}
	sv, sok, err := single(h, "svix-"+name)
	if err != nil {
		return "", false, err
	}
	switch {
	case ok && sok && v != sv:
		return "", false, fmt.Errorf("%w: webhook-%s and svix-%s disagree", ErrDuplicateHeader, name, name)
	case ok:
		return v, true, nil
	}
	return sv, sok, nil
}

// Verify implements [Verifier].
func (s *Standard) Verify(r *http.Request, body []byte, now time.Time) (Delivery, error) {
	id, hasID, err := standardHeader(r.Header, "id")
	if err != nil {
		return Delivery{}, err
	}
	tsText, hasTS, err := standardHeader(r.Header, "timestamp")
	if err != nil {
		return Delivery{}, err
	}
	sigs, hasSig, err := standardHeader(r.Header, "signature")
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
	candidates, err := parseStandardSignatures(sigs)
	if err != nil {
		return Delivery{}, err
	}
	// Signature before the timestamp: an unauthenticated caller learns
	// nothing about our clock.
	if !s.matches(candidates, id, tsText, body) {
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

// matches reports whether a v1 candidate matches a secret or a v1a
// candidate verifies under a public key. Each version is checked only
// against keys of its own kind.
func (s *Standard) matches(candidates []standardSignature, id, ts string, body []byte) bool {
	var v1, v1a [][]byte
	for _, c := range candidates {
		switch c.Version {
		case "v1":
			v1 = append(v1, c.Signature)
		case "v1a":
			v1a = append(v1a, c.Signature)
		}
	}
	content := standardContent(id, ts, body)
	ok := len(v1) > 0 && anyMatch(s.keys, v1, func(key []byte) []byte { return hmacSHA256(key, content) })
	if len(v1a) > 0 {
		for _, pk := range s.public {
			for _, sig := range v1a {
				if ed25519.Verify(pk, content, sig) {
					ok = true
				}
			}
		}
	}
	return ok
}

// standardSignature is one entry of a webhook-signature header.
type standardSignature struct {
	// Version is "v1" (HMAC-SHA256) or "v1a" (Ed25519).
	Version string
	// Signature is the decoded signature: 32 bytes for v1, 64 for v1a.
	Signature []byte
}

// parseStandardSignatures parses a webhook-signature header value: a
// space-separated list of at most 16 "version,base64"
// entries. It returns the decoded v1 and v1a entries in order (other
// versions are skipped), or an error wrapping ErrMalformedHeader when an
// entry is malformed, a v1 or v1a signature is not the canonical standard
// base64 of 32 or 64 bytes respectively, the list is too long, or it holds
// no v1 or v1a entry.
func parseStandardSignatures(h string) ([]standardSignature, error) {
	var out []standardSignature
	n := 0
	for entry := range strings.SplitSeq(h, " ") {
		if entry == "" {
			continue
		}
		if n++; n > maxStandardSignatures {
			return nil, fmt.Errorf("%w: webhook-signature has more than %d entries", ErrMalformedHeader, maxStandardSignatures)
		}
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version == "" || sig == "" {
			return nil, fmt.Errorf("%w: webhook-signature entry %q", ErrMalformedHeader, entry)
		}
		size := 0
		switch version {
		case "v1":
			size = sha256.Size
		case "v1a":
			size = ed25519.SignatureSize
		default:
			continue
		}
		raw, ok := decodeBase64(sig)
		if !ok || len(raw) != size {
			return nil, fmt.Errorf("%w: webhook-signature %s is not the canonical base64 of a %d-byte signature", ErrMalformedHeader, version, size)
		}
		out = append(out, standardSignature{Version: version, Signature: raw})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no v1 or v1a signature in webhook-signature", ErrMalformedHeader)
	}
	return out, nil
}

// Sign implements [Signer]: it sets webhook-id (d.ID), webhook-timestamp
// (d.Timestamp, or now when zero) and webhook-signature with one v1 entry
// per configured secret followed by one v1a entry per signing key. A
// Standard configured with public keys only cannot sign (an
// [idem.ErrInvalidOption]).
func (s *Standard) Sign(h http.Header, d Delivery, body []byte) error {
	if d.ID == "" || strings.Contains(d.ID, ".") {
		return fmt.Errorf("webhook: Standard id %q must be non-empty and contain no '.'", d.ID)
	}
	if len(s.keys)+len(s.private) == 0 {
		return checks.Optionf("webhook: this Standard has public keys only; signing needs a secret or a signing key")
	}
	ts := d.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	tsText := strconv.FormatInt(ts.Unix(), 10)
	content := standardContent(d.ID, tsText, body)
	sigs := make([]string, 0, len(s.keys)+len(s.private))
	for _, k := range s.keys {
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(hmacSHA256(k, content)))
	}
	for _, k := range s.private {
		sigs = append(sigs, "v1a,"+base64.StdEncoding.EncodeToString(ed25519.Sign(k, content)))
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
