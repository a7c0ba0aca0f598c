package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
)

// HeaderKey is the request header carrying the idempotency key
// (draft-ietf-httpapi-idempotency-key-header).
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on a replayed response.
const HeaderReplayed = "Idempotent-Replayed"

// HeaderBodyOmitted is set to "true" on a replay whose original body was
// larger than Config.MaxStoredBody and was not stored.
const HeaderBodyOmitted = "Idempotent-Body-Omitted"

// Key errors, matched with errors.Is. ErrKeyInvalid wraps
// idem.ErrInvalidInput.
var (
	// ErrKeyMissing reports a request without an Idempotency-Key where one
	// is required (400).
	ErrKeyMissing = errors.New("idemhttp: Idempotency-Key header is required")
	// ErrKeyInvalid reports a malformed key: empty, longer than 255
	// characters, containing characters outside visible ASCII, a malformed
	// quoted string, or more than one Idempotency-Key header (400).
	ErrKeyInvalid = fmt.Errorf("%w: invalid Idempotency-Key", idem.ErrInvalidInput)
)

// ParseKey returns the idempotency key of h. It accepts the IETF draft's
// structured-field string ("abc") and the bare token Stripe clients send
// (abc) as the same key. The key must be 1 to 255 visible ASCII characters
// (0x21–0x7E); a quoted string may escape only \" and \\. More than one
// Idempotency-Key header is rejected. Errors wrap [ErrKeyMissing] or
// [ErrKeyInvalid].
func ParseKey(h http.Header) (string, error) {
	vals := h.Values(HeaderKey)
	switch len(vals) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", fmt.Errorf("%w: %d Idempotency-Key headers, want one", ErrKeyInvalid, len(vals))
	}
	return ParseKeyValue(vals[0])
}

// ParseKeyValue parses one Idempotency-Key header value; see [ParseKey].
func ParseKeyValue(v string) (string, error) {
	v = strings.Trim(v, " \t")
	key := v
	if strings.HasPrefix(v, `"`) {
		var err error
		if key, err = unquote(v); err != nil {
			return "", err
		}
	} else if strings.ContainsRune(v, '"') {
		return "", fmt.Errorf("%w: stray quote in bare key", ErrKeyInvalid)
	}
	if err := checkKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// checkKey checks a parsed key: 1 to 255 visible ASCII characters, so
// never NUL, a control character or anything but ASCII.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrKeyInvalid)
	case len(key) > idem.MaxKeyLen:
		return fmt.Errorf("%w: key of %d characters exceeds %d", ErrKeyInvalid, len(key), idem.MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: key contains a character outside visible ASCII at byte %d", ErrKeyInvalid, i)
		}
	}
	return nil
}

// unquote parses an RFC 8941 sf-string: "…" with \" and \\ escapes only.
func unquote(v string) (string, error) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", fmt.Errorf("%w: unterminated quoted key", ErrKeyInvalid)
	}
	in := v[1 : len(v)-1]
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch c {
		case '\\':
			i++
			if i == len(in) || (in[i] != '"' && in[i] != '\\') {
				return "", fmt.Errorf("%w: bad escape in quoted key", ErrKeyInvalid)
			}
			b.WriteByte(in[i])
		case '"':
			return "", fmt.Errorf("%w: unescaped quote in quoted key", ErrKeyInvalid)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
