package errtext_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/errtext"
)

func TestCut(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", errtext.Max-4) + "é" + "tail" // é straddles the cut before the ellipsis
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"short text unchanged", "boom", 10, "boom"},
		{"exactly n unchanged", "abcd", 4, "abcd"},
		{"NUL removed", "a\x00b\x00", 10, "ab"},
		{"invalid UTF-8 replaced", "a\xffb", 10, "a\uFFFDb"},
		{"truncated surrogate replaced", "a\xe2\x82", 10, "a\uFFFD"},
		{"cut with ellipsis", "abcdefghij", 8, "abcde…"},
		{"rune not split at the cut", "abcdé€xyz", 8, "abcd…"},
		{"rune ending at the cut kept", "abcdé€xyz", 9, "abcdé…"},
		{"multibyte at the cut", "ab€€€", 8, "ab€…"},
		{"n too small for the ellipsis", "abcdef", 2, "ab"},
		{"n too small, rune not split", "€abc", 2, ""},
		{"zero", "abc", 0, ""},
		{"NUL removed before cutting", "\x00\x00\x00abcd", 4, "abcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errtext.Cut(tc.in, tc.n); got != tc.want {
				t.Errorf("Cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
	got := errtext.Clean(long)
	if want := strings.Repeat("a", errtext.Max-4) + errtext.Ellipsis; got != want {
		t.Errorf("Clean(long): %d bytes ending %q, want %d bytes ending %q", len(got), got[len(got)-8:], len(want), want[len(want)-8:])
	}
	if errtext.Of(nil) != "" || errtext.Of(errors.New("x\x00y")) != "xy" {
		t.Errorf("Of: %q, %q", errtext.Of(nil), errtext.Of(errors.New("x\x00y")))
	}
}

// The old outbox cut (msg[:2000]) split a rune: the cut text was invalid
// UTF-8, which PostgreSQL refuses. Clean never does.
func TestCleanNeverSplitsARune(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("x", 1999) + "€" + strings.Repeat("y", errtext.Max)
	if utf8.ValidString(s[:2000]) {
		t.Fatal("the example must split a rune at byte 2000")
	}
	got := errtext.Clean(s)
	if !utf8.ValidString(got) || len(got) > errtext.Max || !strings.Contains(got, "€") {
		t.Errorf("Clean: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

func FuzzCut(f *testing.F) {
	for _, s := range []string{"", "boom", "a\x00b", "\xff\xfe", "ab€€€", strings.Repeat("é", 50), "\xe2\x82\x00\xac"} {
		f.Add(s, 8)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 64
		got := errtext.Cut(s, n)
		if !utf8.ValidString(got) {
			t.Fatalf("Cut(%q, %d) = %q: invalid UTF-8", s, n, got)
		}
		if strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("Cut(%q, %d) = %q: holds NUL", s, n, got)
		}
		if len(got) > max(n, 0) {
			t.Fatalf("Cut(%q, %d) = %q: %d bytes", s, n, got, len(got))
		}
		clean := strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
		if len(clean) <= n && got != clean {
			t.Fatalf("Cut(%q, %d) = %q, want %q uncut", s, n, got, clean)
		}
		if len(clean) > n && n > 0 {
			// A cut keeps a prefix of the cleaned text.
			if !strings.HasPrefix(clean, strings.TrimSuffix(got, errtext.Ellipsis)) {
				t.Fatalf("Cut(%q, %d) = %q: not a prefix of %q", s, n, got, clean)
			}
		}
		if errtext.Cut(got, n) != got {
			t.Fatalf("Cut is not idempotent on %q", got)
		}
	})
}
