// Package errtexttest holds the error text that PostgreSQL used to refuse,
// for the tests of every package that stores error text.
package errtexttest

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/errtext"
)

// Cut is the byte at which the relay used to cut error text (msg[:2000]).
const Cut = 2000

// Text returns text that, stored after prefix, has a three-byte rune
// (U+20AC) across byte Cut, so a byte cut there splits it, and a NUL byte
// after it: both are refused by a PostgreSQL text column.
func Text(prefix string) string {
	return strings.Repeat("x", Cut-1-len(prefix)) + "€\x00 after the cut"
}

// Check fails t unless got is what errtext.Clean stores for full (prefix +
// Text(prefix), or any text): valid UTF-8 without NUL, at most
// errtext.Max bytes, and the rune across the old cut kept whole.
func Check(t testing.TB, what, got, full string) {
	t.Helper()
	if want := errtext.Clean(full); got != want {
		t.Errorf("%s stored as %d bytes %q…, want %d bytes %q…", what, len(got), head(got), len(want), head(want))
	}
	if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 || len(got) > errtext.Max {
		t.Errorf("%s: %d bytes, valid UTF-8 %v, NUL %v", what, len(got), utf8.ValidString(got), strings.IndexByte(got, 0) >= 0)
	}
}

func head(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}
