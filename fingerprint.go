package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"mime"
	"strings"
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

// FingerprintFromBytes converts a stored digest back into a Fingerprint.
func FingerprintFromBytes(b []byte) (Fingerprint, error) {
	var f Fingerprint
	if len(b) != len(f) {
		return f, fmt.Errorf("idem: fingerprint of %d bytes, want %d", len(b), len(f))
	}
	copy(f[:], b)
	return f, nil
}

// FingerprintOf hashes parts with SHA-256. Each part is length-prefixed, so
// ("ab","c") and ("a","bc") have different fingerprints.
func FingerprintOf(parts ...[]byte) Fingerprint {
	f := NewFingerprinter()
	for _, p := range parts {
		f.Add(p)
	}
	return f.Sum()
}

// Fingerprinter computes [FingerprintOf] one part at a time: Add (or
// AddString) each part in order, then Sum, which equals FingerprintOf of
// the same parts. Strings are hashed without being copied to byte slices
// first (a request's method, operation and path cost no allocation). A
// Fingerprinter is not safe for concurrent use.
type Fingerprinter struct {
	h hash.Hash
	// scratch holds length prefixes and short strings on their way to h.
	scratch [64]byte
}

// NewFingerprinter returns an empty Fingerprinter.
func NewFingerprinter() *Fingerprinter { return &Fingerprinter{h: sha256.New()} }

// Add hashes p as the next part.
func (f *Fingerprinter) Add(p []byte) {
	f.prefix(len(p))
	f.h.Write(p)
}

// AddString hashes s as the next part, exactly as Add([]byte(s)).
func (f *Fingerprinter) AddString(s string) {
	f.prefix(len(s))
	for len(s) > 0 {
		n := copy(f.scratch[:], s)
		f.h.Write(f.scratch[:n])
		s = s[n:]
	}
}

func (f *Fingerprinter) prefix(n int) {
	binary.BigEndian.PutUint64(f.scratch[:8], uint64(n))
	f.h.Write(f.scratch[:8])
}

// Sum returns the fingerprint of the parts added so far.
func (f *Fingerprinter) Sum() Fingerprint {
	var fp Fingerprint
	f.h.Sum(fp[:0])
	return fp
}

// PayloadFingerprint fingerprints a message payload: the SHA-256 of its
// canonical JSON ([CanonicalJSON]) when the payload is valid JSON (so key
// order and whitespace do not matter), otherwise of its raw bytes. A payload
// that CanonicalJSON refuses (invalid syntax, raw bytes that are not UTF-8,
// duplicate keys, nesting deeper than [MaxJSONDepth]) is fingerprinted as
// raw bytes: such payloads match only byte for byte, and the "json" and
// "raw" domains are separate, so a raw fingerprint never equals a JSON one.
func PayloadFingerprint(payload []byte) Fingerprint {
	if c, err := CanonicalJSON(payload); err == nil {
		return FingerprintOf([]byte("json"), c)
	}
	return FingerprintOf([]byte("raw"), payload)
}

// IsJSONContentType reports whether a Content-Type names JSON
// (application/json or any +json suffix such as application/problem+json).
func IsJSONContentType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// SameFingerprint reports whether stored (a fingerprint as kept in a
// table) is received. A stored value that is not a fingerprint is never the
// same. Every dedup table compares fingerprints through this function, and
// every fingerprint covers canonical JSON where the payload is JSON (see
// PayloadFingerprint), so a retry that reorders keys is the same request.
func SameFingerprint(stored []byte, received Fingerprint) bool {
	f, err := FingerprintFromBytes(stored)
	return err == nil && f == received
}

// CheckFingerprint returns nil when stored is received, and otherwise a
// *FingerprintMismatchError for key (which unwraps to
// ErrFingerprintMismatch).
func CheckFingerprint(key string, stored []byte, received Fingerprint) error {
	if SameFingerprint(stored, received) {
		return nil
	}
	s, _ := FingerprintFromBytes(stored)
	return &FingerprintMismatchError{Key: key, Stored: s, Received: received}
}
