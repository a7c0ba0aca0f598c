package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"

	"github.com/idemkit/idem/internal/fingerprint"
)

// Fingerprint is the SHA-256 digest of a request or payload's canonical
// bytes. Two deliveries under one key must carry the same fingerprint;
// anything else is [ErrFingerprintMismatch].
type Fingerprint [sha256.Size]byte

// String returns the fingerprint as lowercase hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// Short returns the first 12 hex characters, for logs and error messages.
func (f Fingerprint) Short() string { return f.String()[:12] }

// Bytes returns the digest as a slice, the form stored in the database.
func (f Fingerprint) Bytes() []byte { return bytes.Clone(f[:]) }

// IsZero reports whether f is the zero fingerprint.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// FingerprintOf hashes parts with SHA-256. Each part is length-prefixed, so
// ("ab","c") and ("a","bc") have different fingerprints.
func FingerprintOf(parts ...[]byte) Fingerprint { return fingerprint.Of(parts...) }

// payloadFingerprint fingerprints a message payload: the SHA-256 of its
// canonical JSON ([CanonicalJSON]) when the payload is valid JSON (so key
// order and whitespace do not matter), otherwise of its raw bytes. A payload
// that CanonicalJSON refuses (invalid syntax, raw bytes that are not UTF-8,
// duplicate keys, nesting deeper than [MaxJSONDepth]) is fingerprinted as
// raw bytes: such payloads match only byte for byte, and the "json" and
// "raw" domains are separate, so a raw fingerprint never equals a JSON one.
func payloadFingerprint(payload []byte) Fingerprint {
	if c, err := CanonicalJSON(payload); err == nil {
		return FingerprintOf([]byte("json"), c)
	}
	return FingerprintOf([]byte("raw"), payload)
}
