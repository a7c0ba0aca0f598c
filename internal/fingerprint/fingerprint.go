// Package fingerprint is the hashing under idem.Fingerprint: length-prefixed
// SHA-256 of parts, computed whole ([Of]) or one part at a time ([Hasher]),
// the digest's stored form ([FromBytes]), and which media types are JSON.
// It imports nothing of idem, so the root package can build on it.
package fingerprint

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"mime"
	"strings"
)

// Of hashes parts with SHA-256. Each part is length-prefixed, so
// ("ab","c") and ("a","bc") have different digests.
func Of(parts ...[]byte) [sha256.Size]byte {
	f := New()
	for _, p := range parts {
		f.Add(p)
	}
	return f.Sum()
}

// Hasher computes [Of] one part at a time: Add (or AddString) each part in
// order, then Sum, which equals Of of the same parts. Strings are hashed
// without being copied to byte slices first (a request's method, operation
// and path cost no allocation). A Hasher is not safe for concurrent use.
type Hasher struct {
	h hash.Hash
	// scratch holds length prefixes and short strings on their way to h.
	scratch [64]byte
}

// New returns an empty Hasher.
func New() *Hasher { return &Hasher{h: sha256.New()} }

// Add hashes p as the next part.
func (f *Hasher) Add(p []byte) {
	f.prefix(len(p))
	f.h.Write(p)
}

// AddString hashes s as the next part, exactly as Add([]byte(s)).
func (f *Hasher) AddString(s string) {
	f.prefix(len(s))
	for len(s) > 0 {
		n := copy(f.scratch[:], s)
		f.h.Write(f.scratch[:n])
		s = s[n:]
	}
}

func (f *Hasher) prefix(n int) {
	binary.BigEndian.PutUint64(f.scratch[:8], uint64(n))
	f.h.Write(f.scratch[:8])
}

// Sum returns the digest of the parts added so far.
func (f *Hasher) Sum() [sha256.Size]byte {
	var fp [sha256.Size]byte
	f.h.Sum(fp[:0])
	return fp
}

// FromBytes converts a stored digest back into its array form.
func FromBytes(b []byte) ([sha256.Size]byte, error) {
	var f [sha256.Size]byte
	if len(b) != len(f) {
		return f, fmt.Errorf("idem: fingerprint of %d bytes, want %d", len(b), len(f))
	}
	copy(f[:], b)
	return f, nil
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
