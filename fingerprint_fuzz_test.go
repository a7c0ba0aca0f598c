package idem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/fpmatch"
)

// FuzzCanonicalJSON: CanonicalJSON never panics; its output is valid JSON
// with the same meaning as the input, canonicalising it again changes
// nothing, and every other spelling of the same value has the same
// canonical form. Where the old encoding/json-based implementation was
// right (valid UTF-8, no lone surrogate escapes, depth within MaxJSONDepth)
// the output is byte for byte what it gave, so stored fingerprints stay
// valid. exclude is a comma-separated list of ExcludeFields paths.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"seat":"A1","qty":2,"meta":{"b":1,"a":[1,2]}}`,
		"{ \"meta\" : {\"a\":[1, 2],\n \"b\":1},\t\"qty\":2, \"seat\":\"A1\" }",
		`{"qty":2}`, `{"qty":3}`, `[]`, `null`, `"x"`, `1.50`, `1e3`, `{"a":1,"a":2}`, `{"a":1} x`,
		`{"<>&":"\u003c\u2028"}`, `{"é":"\u00e9","e":"😀"}`, `[{"b":1,"a":{"d":[],"c":{}}}]`, ``, `{`,
		// Depth: at the limit, one beyond, and a hostile run of openers.
		strings.Repeat("[", idem.MaxJSONDepth) + strings.Repeat("]", idem.MaxJSONDepth),
		strings.Repeat("[", idem.MaxJSONDepth+1) + strings.Repeat("]", idem.MaxJSONDepth+1),
		strings.Repeat(`{"a":`, idem.MaxJSONDepth) + "1" + strings.Repeat("}", idem.MaxJSONDepth),
		strings.Repeat(`{"a":`, idem.MaxJSONDepth+1) + "1" + strings.Repeat("}", idem.MaxJSONDepth+1),
		strings.Repeat("[", 4*idem.MaxJSONDepth),
		// UTF-8 and surrogates.
		"\"\xff\"", "\"\xfe\"", "\"\xed\xa0\x80\"", `"\ud800"`, `"\uDBFF"`, `"\udc00\ud800"`, `"\ud83d\ude00"`,
		`{"\udbff":1,"\ud800":2}`, `{"\ud800":1,"\uD800":2}`, `"\ud800\u0022"`, "\"\u2028\"", `"\/\b\u0000"`,
		`{"b":{"y":1,"x":2},"a":[{"d":1,"c":2}],"ts":3}`,
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"ts":1,"meta":{"id":2,"b":1,"a":0},"a":1,"ts":3}`), "ts,meta.id")
	f.Add([]byte(`{"a":{"b":{"c":1,"d":2}},"b":[{"a":1}]}`), "a.b.c,b.a")
	f.Fuzz(func(t *testing.T, data []byte, exclude string) {
		var ex []string
		if exclude != "" {
			ex = strings.Split(exclude, ",")
		}
		c, err := idem.CanonicalJSON(data, ex...)
		old, oldErr := legacyCanonicalJSON(data, ex...)
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidJSON) {
				t.Fatalf("%q: error %v is not ErrInvalidJSON", data, err)
			}
			if oldErr == nil {
				switch {
				case errors.Is(err, idem.ErrJSONTooDeep):
					if d := jsonDepth(old); d <= idem.MaxJSONDepth {
						t.Fatalf("%q: refused as too deep at depth %d", data, d)
					}
				case !utf8.Valid(data):
				default:
					t.Fatalf("%q: refused (%v), accepted before as %q", data, err, old)
				}
			}
			return
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q of %q is not valid JSON", c, data)
		}
		if d := jsonDepth(c); d > idem.MaxJSONDepth {
			t.Fatalf("%q: accepted at depth %d", data, d)
		}
		c2, err := idem.CanonicalJSON(c, ex...)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("not idempotent: %q -> %q (%v)", c, c2, err)
		}
		if !utf8.Valid(data) {
			t.Fatalf("%q: invalid UTF-8 accepted", data)
		}
		lone := hasLoneSurrogate(c)
		if !lone && (oldErr != nil || !bytes.Equal(c, old)) {
			t.Fatalf("%q: canonical form %q, before %q (%v)", data, c, old, oldErr)
		}
		// Every string spelled with escapes only is the same value.
		if e, err := idem.CanonicalJSON(escapeAll(c), ex...); err != nil || !bytes.Equal(e, c) {
			t.Fatalf("%q respelled as %q: %q (%v), want %q", data, escapeAll(c), e, err, c)
		}
		if fpmatch.Payload(data) != fpmatch.Payload(c) && len(ex) == 0 {
			t.Fatalf("fingerprints differ for %q and its canonical form", data)
		}
		// encoding/json reads every lone surrogate as U+FFFD, so it cannot
		// judge the meaning of those; and excluded fields change it.
		if lone || len(ex) > 0 {
			return
		}
		a, err := decodeJSON(data)
		if err != nil {
			t.Fatalf("%q: encoding/json refuses what CanonicalJSON accepted: %v", data, err)
		}
		b, err := decodeJSON(c)
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("meaning changed: %q -> %q", data, c)
		}
		// encoding/json's own spelling (sorted keys, HTML escapes, no
		// whitespace) and an indented one are the same value.
		for _, re := range [][]byte{mustMarshal(t, a, false), mustMarshal(t, a, true)} {
			if r, err := idem.CanonicalJSON(re); err != nil || !bytes.Equal(r, c) {
				t.Fatalf("%q re-encoded by encoding/json as %q: canonical %q (%v), want %q", data, re, r, err, c)
			}
		}
	})
}

// FuzzCanonicalJSONEqual: two valid UTF-8 inputs without duplicate keys or
// lone surrogates have the same canonical form exactly when encoding/json
// decodes them to equal values.
func FuzzCanonicalJSONEqual(f *testing.F) {
	for _, p := range [][2]string{
		{`"\u00e9"`, `"é"`}, {`"\/"`, `"/"`}, {`{"a":1,"b":[true]}`, ` { "b" : [ true ] , "a" : 1 } `},
		{`"\ud83d\ude00"`, `"😀"`}, {`"\u2028"`, "\"\u2028\""}, {`"\u003c"`, `"<"`}, {`1.0`, `1`},
		{`{"a":"x"}`, `{"a":"y"}`}, {`[1,2]`, `[2,1]`}, {`"\ud800"`, `"\udbff"`}, {"\"\xff\"", "\"\xfe\""},
	} {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	f.Fuzz(func(t *testing.T, x, y []byte) {
		cx, errX := idem.CanonicalJSON(x)
		cy, errY := idem.CanonicalJSON(y)
		if errX != nil || errY != nil || hasLoneSurrogate(cx) || hasLoneSurrogate(cy) {
			return
		}
		a, errA := decodeJSON(x)
		b, errB := decodeJSON(y)
		if errA != nil || errB != nil {
			t.Fatalf("encoding/json refuses what CanonicalJSON accepted: %q %v, %q %v", x, errA, y, errB)
		}
		if same := bytes.Equal(cx, cy); same != reflect.DeepEqual(a, b) {
			t.Fatalf("%q and %q: canonical forms equal %v (%q, %q), values equal %v", x, y, same, cx, cy, !same)
		}
		if same := fpmatch.Payload(x) == fpmatch.Payload(y); same != bytes.Equal(cx, cy) {
			t.Fatalf("%q and %q: fingerprints equal %v, canonical forms equal %v", x, y, same, !same)
		}
	})
}

func decodeJSON(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func mustMarshal(t *testing.T, v any, indent bool) []byte {
	var b []byte
	var err error
	if indent {
		b, err = json.MarshalIndent(v, " ", "\t")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonDepth returns the nesting depth of valid JSON.
func jsonDepth(data []byte) int {
	depth, deepest, in := 0, 0, false
	for i := 0; i < len(data); i++ {
		switch b := data[i]; {
		case in && b == '\\':
			i++
		case b == '"':
			in = !in
		case !in && (b == '[' || b == '{'):
			depth++
			deepest = max(deepest, depth)
		case !in && (b == ']' || b == '}'):
			depth--
		}
	}
	return deepest
}

// hasLoneSurrogate reports whether canonical JSON holds a \udXXX escape
// (the canonical form writes surrogates only when they are lone).
func hasLoneSurrogate(c []byte) bool {
	for i := 0; i+5 < len(c); i++ {
		if c[i] != '\\' {
			continue
		}
		if c[i+1] == 'u' && c[i+2] == 'd' && strings.IndexByte("89abcdef", c[i+3]) >= 0 {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

// escapeAll respells every string of canonical JSON c with \u escapes
// (uppercase hex, surrogate pairs beyond U+FFFF) and `\/` for '/'; escapes
// already in c are kept.
func escapeAll(c []byte) []byte {
	var out []byte
	in := false
	for i := 0; i < len(c); {
		b := c[i]
		switch {
		case !in:
			in = b == '"'
			out = append(out, b)
			i++
		case b == '"':
			in = false
			out = append(out, b)
			i++
		case b == '\\':
			n := 2
			if c[i+1] == 'u' {
				n = 6
			}
			out = append(out, c[i:i+n]...)
			i += n
		case b == '/':
			out = append(out, `\/`...)
			i++
		default:
			r, size := utf8.DecodeRune(c[i:])
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				out = fmt.Appendf(out, `\u%04X\u%04X`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04X`, r)
			}
			i += size
		}
	}
	return out
}
