package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"slices"
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
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var f Fingerprint
	h.Sum(f[:0])
	return f
}

// PayloadFingerprint fingerprints a message payload: the SHA-256 of its
// canonical JSON when the payload is valid JSON (so key order and whitespace
// do not matter), otherwise of its raw bytes.
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

// ErrInvalidJSON reports a body that CanonicalJSON cannot canonicalise:
// syntax errors, trailing data or duplicate object keys (which different
// parsers resolve differently, so they cannot have one meaning).
var ErrInvalidJSON = fmt.Errorf("%w: invalid JSON", ErrInvalidInput)

// CanonicalJSON returns data with object keys sorted (by their UTF-8 bytes),
// insignificant whitespace removed and strings re-escaped minimally. Numbers
// keep their literal text. Top-level or dotted paths listed in exclude
// ("metadata.request_id") are removed before canonicalisation, for fields
// that legitimately differ between retries. Duplicate object keys are
// rejected with [ErrInvalidJSON].
func CanonicalJSON(data []byte, exclude ...string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out bytes.Buffer
	out.Grow(len(data))
	var ex [][]string
	for _, e := range exclude {
		if e != "" {
			ex = append(ex, strings.Split(e, "."))
		}
	}
	if err := canonValue(dec, &out, ex); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data", ErrInvalidJSON)
	}
	return out.Bytes(), nil
}

func canonValue(dec *json.Decoder, out *bytes.Buffer, exclude [][]string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonObject(dec, out, exclude)
		case '[':
			out.WriteByte('[')
			first := true
			for dec.More() {
				if !first {
					out.WriteByte(',')
				}
				first = false
				if err := canonValue(dec, out, nil); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidJSON, err)
			}
			out.WriteByte(']')
			return nil
		}
		return fmt.Errorf("%w: unexpected %v", ErrInvalidJSON, t)
	case string:
		return writeJSONString(out, t)
	case json.Number:
		out.WriteString(t.String())
	case bool:
		if t {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	}
	return nil
}

func canonObject(dec *json.Decoder, out *bytes.Buffer, exclude [][]string) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidJSON, err)
		}
		key, ok := kt.(string)
		if !ok {
			return fmt.Errorf("%w: object key is not a string", ErrInvalidJSON)
		}
		var sub [][]string
		drop := false
		for _, e := range exclude {
			if e[0] != key {
				continue
			}
			if len(e) == 1 {
				drop = true
			} else {
				sub = append(sub, e[1:])
			}
		}
		var buf bytes.Buffer
		if err := canonValue(dec, &buf, sub); err != nil {
			return err
		}
		for _, m := range members {
			if m.key == key {
				return fmt.Errorf("%w: duplicate key %q", ErrInvalidJSON, key)
			}
		}
		if !drop {
			members = append(members, member{key, buf.Bytes()})
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := writeJSONString(out, m.key); err != nil {
			return err
		}
		out.WriteByte(':')
		out.Write(m.val)
	}
	out.WriteByte('}')
	return nil
}

func writeJSONString(out *bytes.Buffer, s string) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	out.Truncate(out.Len() - 1) // Encode appends a newline
	return nil
}
