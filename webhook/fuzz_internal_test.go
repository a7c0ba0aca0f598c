package webhook

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// The timestamp parser (webhook-timestamp, Stripe's t=) takes decimal Unix
// seconds only: 1 to 12 digits, no sign, no space, no exponent. Whatever it
// accepts is exactly what strconv reads from the same text.
func FuzzParseUnix(f *testing.F) {
	for _, s := range []string{"1750000000", "0", "000000000001", "999999999999", "1000000000000", "", "-1", "+1", " 1", "1 ", "1.5", "1e9", "0x10", "١٢٣", "1_000", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := parseUnix(s)
		if err != nil {
			if !errors.Is(err, ErrMalformedHeader) {
				t.Fatalf("error class: %v", err)
			}
			return
		}
		n, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil || len(s) > 12 || strings.Trim(s, "0123456789") != "" || ts.Unix() != n {
			t.Fatalf("%q accepted as %d", s, ts.Unix())
		}
	})
}

// decodeMAC takes exactly the lowercase hex spelling of 32 bytes.
func FuzzDecodeMAC(f *testing.F) {
	for _, s := range []string{strings.Repeat("ab", 32), strings.Repeat("AB", 32), strings.Repeat("a", 63), strings.Repeat("a", 65), strings.Repeat("0", 64), strings.Repeat("g", 64), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, ok := decodeMAC(s)
		if ok != (len(raw) == 32 && hex.EncodeToString(raw) == s) {
			t.Fatalf("%q: ok=%v raw=%x", s, ok, raw)
		}
	})
}

// standardHeader resolves a Standard Webhooks header and its svix- alias:
// it returns a value only when every copy present carries it, and errors
// only with ErrDuplicateHeader.
func FuzzStandardHeader(f *testing.F) {
	f.Add("msg_1", "msg_1", true, true, false)
	f.Add("msg_1", "msg_2", true, true, false)
	f.Add("", "msg_1", true, true, false)
	f.Add("msg_1", "", true, false, true)
	f.Fuzz(func(t *testing.T, std, svix string, hasStd, hasSvix, twice bool) {
		h := http.Header{}
		if hasStd {
			h.Add("webhook-id", std)
			if twice {
				h.Add("webhook-id", std)
			}
		}
		if hasSvix {
			h.Add("svix-id", svix)
		}
		v, ok, err := standardHeader(h, "id")
		switch {
		case err != nil:
			if !errors.Is(err, ErrDuplicateHeader) || !(twice && hasStd || hasStd && hasSvix && std != svix) {
				t.Fatalf("%v: %v", h, err)
			}
		case !ok:
			if hasStd || hasSvix {
				t.Fatalf("%v: not found", h)
			}
		case hasStd && v != std, hasSvix && v != svix, !hasStd && !hasSvix, twice && hasStd:
			t.Fatalf("%v: returned %q", h, v)
		}
	})
}
