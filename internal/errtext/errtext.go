// Package errtext makes error text (and a provider's or an operator's text)
// storable in a text column of every dialect idem runs on. PostgreSQL
// refuses a string holding invalid UTF-8 or a NUL byte, so a failure whose
// text held either could not be recorded: the write failed, the outbox
// event or effect was never marked, the dead letter never parked. Every
// place that stores such text passes it through [Clean] first.
package errtext

import (
	"strings"
	"unicode/utf8"
)

// Max is the most bytes of error text idem stores: longer text is cut, on a
// rune boundary, with [Ellipsis] at its end, the whole within Max.
const Max = 4096

// Ellipsis ends text that was cut.
const Ellipsis = "…"

// Clean returns s storable and at most [Max] bytes long: see [Cut].
func Clean(s string) string { return Cut(s, Max) }

// Cut returns s with invalid UTF-8 replaced by U+FFFD and NUL bytes
// removed, cut on a rune boundary to at most n bytes: when it has to cut,
// the result ends with [Ellipsis] (unless n is too small to hold it) and
// is n bytes or fewer. The result is always valid UTF-8 without NUL.
func Cut(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s // the common case: nothing to do, nothing allocated
	}
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) <= n {
		return s
	}
	keep, tail := n-len(Ellipsis), Ellipsis
	if keep < 0 {
		keep, tail = n, ""
	}
	// Back up to the start of the rune that would be split.
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + tail
}

// Of returns err's text made storable by [Clean], "" for a nil err.
func Of(err error) string {
	if err == nil {
		return ""
	}
	return Clean(err.Error())
}
