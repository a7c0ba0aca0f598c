package idemhttp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

func TestParseKey(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{`abc`, "abc", true},
		{`"abc"`, "abc", true},
		{`  "abc"  `, "abc", true},
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"a\"b\\c"`, `a"b\c`, true},
		{`""`, "", false},
		{``, "", false},
		{`"abc`, "", false},
		{`ab"c`, "", false},
		{`"a b"`, "", false},
		{`a b`, "", false},
		{`"a\nb"`, "", false},
		{"caf\xc3\xa9", "", false},
		{"a\x7f", "", false},
		{strings.Repeat("k", 255), strings.Repeat("k", 255), true},
		{strings.Repeat("k", 256), "", false},
		{`"` + strings.Repeat("k", 256) + `"`, "", false},
		{strings.Repeat("k", 1<<16), "", false},
		{"\x00", "", false},
		{"k\x00", "", false},
		{"\"k\x00\"", "", false},
		{"\xff", "", false},
		{"\"\xc3\"", "", false},
		{"\xed\xa0\x80", "", false},
		{`"abc";v=1`, "", false},
		{`"abc", "def"`, "", false},
		{`"a\u0041"`, "", false},
	} {
		got, err := idemhttp.ParseKeyValue(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseKeyValue(%q) = %q, %v; want %q ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
	if _, err := idemhttp.ParseKey(http.Header{"Idempotency-Key": {"a", "a"}}); err == nil {
		t.Error("two Idempotency-Key headers accepted")
	}
}

// FuzzParseKey: an accepted key is 1–255 visible ASCII characters (so
// never NUL, a control character or invalid UTF-8), and the bare and quoted
// spellings of it parse back to the same key. The seed corpus runs in plain
// "go test".
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		`abc`, `"abc"`, `""`, `"a\"b"`, `a b`, `"unterminated`, `"a\\b"`,
		`8e03978e-40d5-43e8-bc93-6894a57f9324`, `"abc-123"`,
		// NUL and other control characters, bare and quoted.
		"\x00", "k\x00", "\"k\x00\"", "\x01", "a\tb", "\"a\r\nb\"", "a\x7f",
		// Invalid UTF-8, lone surrogates, non-ASCII.
		"caf\xc3\xa9", "\xff", "k\xfe", "\xc3", "\"\xc3\"", "\xed\xa0\x80", "\"\xed\xbf\xbf\"", "\uFFFD",
		// Lengths around the limit, and far beyond it.
		strings.Repeat("k", 255), strings.Repeat("k", 256), `"` + strings.Repeat("k", 255) + `"`,
		`"` + strings.Repeat("k", 256) + `"`, strings.Repeat("k", 1<<16), `"` + strings.Repeat(`\\`, 255) + `"`,
		// Structured-field forms other than sf-string: parameters, lists,
		// byte sequences, tokens, integers, escapes sf-string forbids.
		`"abc";v=1`, `"abc", "def"`, `abc,def`, `:YWJj:`, `?1`, `42`, `*tok`, `"a\nb"`, `"a\u0041"`,
		`"\"`, `"\\"`, `"a"b"`, `" abc"`, `  "abc"  `, "\t\"abc\"\t",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := idemhttp.ParseKeyValue(v)
		if err != nil {
			return
		}
		if key == "" || len(key) > 255 {
			t.Fatalf("accepted key of length %d", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("accepted non-visible byte %#x", key[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if k2, err := idemhttp.ParseKeyValue(quoted); err != nil || k2 != key {
			t.Fatalf("quoted %q parsed to %q, %v; want %q", quoted, k2, err, key)
		}
		if !strings.Contains(key, `"`) {
			if k3, err := idemhttp.ParseKeyValue(key); err != nil || k3 != key {
				t.Fatalf("bare %q parsed to %q, %v", key, k3, err)
			}
		}
	})
}
