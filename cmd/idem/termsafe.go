package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// termSafe returns s ready to be shown on an operator's terminal: every
// byte or character a terminal could act on is replaced by a visible
// escape, so stored data (a dead letter's payload, a stored response, a
// consumer name) cannot move the cursor, retitle the window, write to the
// clipboard (OSC 52) or hide text. Escaped are the C0 controls and DEL
// (\n, \r and \t as themselves, the rest as \x1b), the C1 controls and the
// Unicode line/paragraph separators and bidirectional overrides (as
// \u009b), and every byte of invalid UTF-8 (as \xff). Everything else,
// backslashes included, is kept, so the result is for reading, not for
// parsing back: machine output (--json) prints stored data exactly.
func termSafe(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafeRune(r) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unsafeRune reports whether a terminal may interpret r instead of showing
// it: C0, DEL, C1, U+2028/U+2029 and the bidirectional formatting
// characters (which reorder what is shown around them).
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r == 0x2028, r == 0x2029,
		r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
