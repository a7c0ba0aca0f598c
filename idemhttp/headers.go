package idemhttp

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"
)

// encodeHeaders returns what json.Marshal writes for the http.Header of
// the names (sorted, without duplicates) that h holds, skipping those skip
// reports: the stored headers of a record. Names and values of printable
// ASCII that JSON writes unescaped (the usual case) are written directly,
// with no map and no reflection; anything else goes to json.Marshal, so
// the result is always what it gives.
func encodeHeaders(h http.Header, names []string, skip func(string) bool) string {
	n, plain := 2, true
	for _, k := range names {
		vs, ok := h[k]
		if !ok || skip(k) {
			continue
		}
		if vs == nil || !plainJSON(k) {
			plain = false
			break
		}
		n += len(k) + 6
		for _, v := range vs {
			if !plainJSON(v) {
				plain = false
				break
			}
			n += len(v) + 3
		}
	}
	if !plain {
		stored := http.Header{}
		for _, k := range names {
			if vs, ok := h[k]; ok && !skip(k) {
				stored[k] = vs
			}
		}
		b, _ := json.Marshal(stored)
		return string(b)
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for _, k := range names {
		vs, ok := h[k]
		if !ok || skip(k) {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":[`...)
		for i, v := range vs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	return string(append(b, '}'))
}

// plainJSON reports whether json.Marshal writes s as is between quotes:
// printable ASCII other than the quote, the backslash and the characters
// it escapes for HTML (<, >, &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// sortedNames returns names sorted and without duplicates, the order
// json.Marshal writes a map's keys in.
func sortedNames(names []string) []string {
	s := slices.Clone(names)
	slices.Sort(s)
	return slices.Compact(s)
}

// decodeHeaders decodes a record's stored headers (the JSON that
// json.Marshal writes for an http.Header) into h, which must be empty. The
// form the middleware stores — an object of arrays of strings with no
// escape, no space and valid UTF-8 — is read without reflection, the
// strings sharing s (one replay decodes its headers on every request);
// anything else (escapes, null, an operator's spacing) goes to
// encoding/json, so the result is always what json.Unmarshal gives.
func decodeHeaders(s string, h http.Header) error {
	if plainHeaders(s, h) {
		return nil
	}
	clear(h)
	return json.Unmarshal([]byte(s), &h)
}

// plainHeaders is decodeHeaders' fast path; false means s is not in the
// plain form (h may then hold part of it).
func plainHeaders(s string, h http.Header) bool {
	if len(s) < 2 || s[0] != '{' || strings.IndexByte(s, '\\') >= 0 || !utf8.ValidString(s) {
		return false
	}
	i := 1
	if s[i] == '}' {
		return i+1 == len(s)
	}
	for {
		k, j, ok := plainString(s, i)
		if !ok || j+1 >= len(s) || s[j] != ':' || s[j+1] != '[' {
			return false
		}
		i = j + 2
		if i >= len(s) {
			return false
		}
		n := 0 // the values: count them first, to allocate the slice once
		if s[i] != ']' {
			n = 1
			for p := i; ; {
				_, q, ok := plainString(s, p)
				if !ok || q >= len(s) {
					return false
				}
				if s[q] == ']' {
					break
				}
				if s[q] != ',' {
					return false
				}
				n, p = n+1, q+1
			}
		}
		vs := make([]string, 0, n)
		for range n {
			v, q, _ := plainString(s, i)
			vs, i = append(vs, v), q+1 // past ',' or the closing ']'
		}
		if n == 0 {
			i++ // past ']'
		}
		h[k] = vs
		if i >= len(s) {
			return false
		}
		switch s[i] {
		case ',':
			i++
		case '}':
			return i+1 == len(s)
		default:
			return false
		}
	}
}

// plainString reads the JSON string without escapes that starts at s[i]
// and returns it and the index after its closing quote; false when s[i] is
// not a quote, the string does not end, or it holds a control character.
func plainString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	end := strings.IndexByte(s[i+1:], '"')
	if end < 0 {
		return "", 0, false
	}
	v := s[i+1 : i+1+end]
	for j := 0; j < len(v); j++ {
		if v[j] < 0x20 {
			return "", 0, false
		}
	}
	return v, i + 2 + end, true
}
