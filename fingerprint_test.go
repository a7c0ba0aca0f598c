package idem_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string
		exclude        []string
	}{
		{name: "sorted keys", in: `{"b":1,"a":2}`, want: `{"a":2,"b":1}`},
		{name: "whitespace", in: " {\n \"a\" : [ 1 , 2 ] ,\t\"b\":{ } } ", want: `{"a":[1,2],"b":{}}`},
		{name: "nested", in: `{"z":{"y":1,"x":[{"d":1,"c":2}]}}`, want: `{"z":{"x":[{"c":2,"d":1}],"y":1}}`},
		{name: "numbers keep their text", in: `{"n":1.50,"m":1e3}`, want: `{"m":1e3,"n":1.50}`},
		{name: "no html escaping", in: `{"s":"<a&b>"}`, want: `{"s":"<a&b>"}`},
		{name: "unicode escapes normalised", in: `{"s":"\u00e9"}`, want: `{"s":"é"}`},
		{name: "literals", in: `[true,false,null]`, want: `[true,false,null]`},
		{name: "exclude top-level", in: `{"a":1,"request_id":"x"}`, want: `{"a":1}`, exclude: []string{"request_id"}},
		{name: "exclude nested", in: `{"meta":{"ts":1,"k":2},"a":1}`, want: `{"a":1,"meta":{"k":2}}`, exclude: []string{"meta.ts"}},
		{name: "scalar", in: `"x"`, want: `"x"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := idem.CanonicalJSON([]byte(c.in), c.exclude...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
			again, err := idem.CanonicalJSON(got, c.exclude...)
			if err != nil || string(again) != string(got) {
				t.Fatalf("not idempotent: %s → %s (%v)", got, again, err)
			}
		})
	}
}

func TestCanonicalJSONRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{``, `{`, `{"a":1}{}`, `{"a":1,"a":2}`, `[1,]`, `{"a" 1}`, `nul`} {
		if _, err := idem.CanonicalJSON([]byte(in)); !errors.Is(err, idem.ErrInvalidJSON) || !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%q: got %v, want ErrInvalidJSON", in, err)
		}
	}
}

func TestPayloadFingerprint(t *testing.T) {
	t.Parallel()
	a := idem.PayloadFingerprint([]byte(`{"amount":10,"currency":"EUR"}`))
	b := idem.PayloadFingerprint([]byte(`{ "currency": "EUR", "amount": 10 }`))
	c := idem.PayloadFingerprint([]byte(`{"amount":11,"currency":"EUR"}`))
	if a != b {
		t.Error("reordered JSON must have the same fingerprint")
	}
	if a == c {
		t.Error("different JSON must have different fingerprints")
	}
	raw1 := idem.PayloadFingerprint([]byte("not json"))
	raw2 := idem.PayloadFingerprint([]byte("not  json"))
	if raw1 == raw2 {
		t.Error("raw payloads are compared byte for byte")
	}
	// A JSON string and the same bytes raw must not collide.
	if idem.PayloadFingerprint([]byte(`"x"`)) == idem.FingerprintOf([]byte("raw"), []byte(`"x"`)) {
		t.Error("JSON and raw fingerprints share a domain")
	}
	if idem.FingerprintOf([]byte("ab"), []byte("c")) == idem.FingerprintOf([]byte("a"), []byte("bc")) {
		t.Error("FingerprintOf parts are not length-prefixed")
	}
	f, err := idem.FingerprintFromBytes(a.Bytes())
	if err != nil || f != a || len(a.String()) != 64 || len(a.Short()) != 12 {
		t.Errorf("round trip: %v %v", f, err)
	}
	if _, err := idem.FingerprintFromBytes([]byte{1, 2}); err == nil {
		t.Error("short digest accepted")
	}
}

func TestIsJSONContentType(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/json":                true,
		"application/json; charset=utf-8": true,
		"application/problem+json":        true,
		"text/plain":                      false,
		"":                                false,
		"application/jsonx":               false,
	} {
		if got := idem.IsJSONContentType(ct); got != want {
			t.Errorf("%q: %v, want %v", ct, got, want)
		}
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("card declined")
	p := idem.Permanent(base)
	if !idem.IsPermanent(p) || idem.IsRetryable(p) || !errors.Is(p, base) {
		t.Fatal("Permanent(err) must be permanent, not retryable, and wrap err")
	}
	if idem.Permanent(p) != p {
		t.Error("Permanent is not idempotent")
	}
	if idem.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	wrapped := fmt.Errorf("charge: %w", p)
	if !idem.IsPermanent(wrapped) {
		t.Error("wrapping hides permanence")
	}
	if !idem.IsRetryable(base) || idem.IsPermanent(base) {
		t.Error("a plain error is retryable")
	}
	mismatch := &idem.FingerprintMismatchError{Key: "k"}
	if !idem.IsPermanent(mismatch) || !errors.Is(mismatch, idem.ErrFingerprintMismatch) {
		t.Error("fingerprint mismatch is permanent")
	}
	for err, class := range map[error]string{
		nil:                             "",
		p:                               "permanent",
		mismatch:                        "fingerprint_mismatch",
		idem.ErrInvalidInput:            "invalid_input",
		base:                            "transient",
		fmt.Errorf("x: %w", errTimeout): "timeout",
	} {
		if got := idem.ErrorClass(err); got != class {
			t.Errorf("ErrorClass(%v) = %q, want %q", err, got, class)
		}
	}
}

var errTimeout = contextDeadline()

func TestValidateID(t *testing.T) {
	t.Parallel()
	ok := []string{"a", "order-1:confirmed", "ü-ñ"}
	bad := []string{"", string(make([]byte, 256)), "a\x00b", "tab\there", "del\x7f"}
	for _, id := range ok {
		if err := idem.ValidateID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range bad {
		if err := idem.ValidateID(id); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%q accepted", id)
		}
	}
}
