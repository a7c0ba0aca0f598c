package idem_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fingerprint"
	"github.com/idemkit/idem/internal/fpmatch"
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
		{name: "exclude first member", in: `{"request_id":"x","b":1,"a":2}`, want: `{"a":2,"b":1}`, exclude: []string{"request_id"}},
		{name: "exclude middle member", in: `{"a":1,"request_id":{"y":[1]},"b":2}`, want: `{"a":1,"b":2}`, exclude: []string{"request_id"}},
		{name: "exclude only member", in: `{"request_id":{"b":1,"a":2}}`, want: `{}`, exclude: []string{"request_id"}},
		{name: "exclude nested, reordering inside", in: `{"z":{"ts":3,"b":{"y":1,"x":2},"a":2},"a":[{"d":1,"c":2}]}`,
			want: `{"a":[{"c":2,"d":1}],"z":{"a":2,"b":{"x":2,"y":1}}}`, exclude: []string{"z.ts"}},
		{name: "exclude does not reach into arrays", in: `[{"ts":1}]`, want: `[{"ts":1}]`, exclude: []string{"ts"}},
		{name: "duplicates of an excluded key are dropped", in: `{"ts":1,"a":1,"ts":2}`, want: `{"a":1}`, exclude: []string{"ts"}},
		{name: "sorted by bytes, not by escaped text", in: `{"a":1,"\n":2,"\"":3,"é":4,"Z":5}`, want: `{"\n":2,"\"":3,"Z":5,"a":1,"é":4}`},
		{name: "sorted inner object in unsorted outer", in: `{"b":{"x":{"d":1,"c":2},"y":1},"a":[{"b":1,"a":2},3]}`,
			want: `{"a":[{"a":2,"b":1},3],"b":{"x":{"c":2,"d":1},"y":1}}`},
		{name: "deep mixed", in: `[[{"b":[{"d":{"f":1,"e":2},"c":0}],"a":{}}],{"y":[],"x":null}]`,
			want: `[[{"a":{},"b":[{"c":0,"d":{"e":2,"f":1}}]}],{"x":null,"y":[]}]`},
		{name: "numbers", in: `[0,-0,1.5e+3,-12.25E-2,10]`, want: `[0,-0,1.5e+3,-12.25E-2,10]`},
		{name: "escapes", in: `"\"\\\/\b\f\n\r\t\u0000\u001f\u0041\u007f\u2028\u2029\ufffd"`,
			want: "\"\\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001fA\x7f\\u2028\\u2029\ufffd\""},
		{name: "raw separators escaped", in: "\"\u2028\u2029\"", want: `"\u2028\u2029"`},
		{name: "surrogate pair decoded", in: `"\ud83d\ude00\uD83D\uDE00"`, want: `"😀😀"`},
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
	for _, in := range []string{``, `{`, `{"a":1}{}`, `{"a":1,"a":2}`, `[1,]`, `{"a" 1}`, `nul`,
		`{"b":1,"a":1,"b":2}`, `{"a":{"x":1,"x":1}}`, `[1 2]`, `{"a":1,}`, `{,}`, `[,1]`, `{1:2}`, `{"a":1 "b":2}`,
		`01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `tru`, `truex`, `nulll`, `"abc`, `"\x"`, `"\u12"`, `"\u12g4"`,
		"\"a\nb\"", "\"\x00\"", "\xef\xbb\xbf{}", `]`, `}`, `[}`, `{]`, `[1]]`, ` `, `"\ud800\u12"`} {
		if _, err := idem.CanonicalJSON([]byte(in)); !errors.Is(err, idem.ErrInvalidJSON) || !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%q: got %v, want ErrInvalidJSON", in, err)
		}
	}
}

func TestCanonicalJSONDepth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, open, close, leaf string }{
		{"arrays", "[", "]", "1"},
		{"objects", `{"a":`, "}", "1"},
		{"empty array innermost", "[", "]", "[]"},
		{"empty object innermost", "[", "]", "{}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			nest := func(depth int) []byte {
				return []byte(strings.Repeat(c.open, depth) + c.leaf + strings.Repeat(c.close, depth))
			}
			extra := 0
			if c.leaf == "[]" || c.leaf == "{}" {
				extra = 1 // the leaf is a container of its own
			}
			atLimit := nest(idem.MaxJSONDepth - extra)
			got, err := idem.CanonicalJSON(atLimit)
			if err != nil {
				t.Fatalf("depth %d refused: %v", idem.MaxJSONDepth, err)
			}
			if !bytes.Equal(got, atLimit) {
				t.Fatalf("depth %d: canonical form differs from the input", idem.MaxJSONDepth)
			}
			_, err = idem.CanonicalJSON(nest(idem.MaxJSONDepth - extra + 1))
			if !errors.Is(err, idem.ErrJSONTooDeep) || !errors.Is(err, idem.ErrInvalidJSON) || !errors.Is(err, idem.ErrInvalidInput) {
				t.Fatalf("depth %d: got %v, want ErrJSONTooDeep", idem.MaxJSONDepth+1, err)
			}
			if got, want := fpmatch.Payload(nest(idem.MaxJSONDepth-extra+1)), idem.FingerprintOf([]byte("raw"), nest(idem.MaxJSONDepth-extra+1)); got != want {
				t.Fatal("a body nested too deep is not fingerprinted as raw bytes")
			}
		})
	}
}

// A hostile body of nothing but openers is refused without exhausting the
// stack: before, 4 MiB of "[" killed the process with a stack overflow.
func TestCanonicalJSONHugeNesting(t *testing.T) {
	t.Parallel()
	for _, open := range []string{"[", `{"a":`, `[{"a":`} {
		body := bytes.Repeat([]byte(open), (4<<20)/len(open))
		if _, err := idem.CanonicalJSON(body); !errors.Is(err, idem.ErrJSONTooDeep) {
			t.Errorf("%d bytes of %q: got %v, want ErrJSONTooDeep", len(body), open, err)
		}
		if fpmatch.Payload(body) != idem.FingerprintOf([]byte("raw"), body) {
			t.Errorf("%q: not fingerprinted as raw bytes", open)
		}
	}
	// Wide is fine: a long flat array is not deep.
	wide := "[" + strings.Repeat("[],", 1<<20) + "[]]"
	if got, err := idem.CanonicalJSON([]byte(wide)); err != nil || string(got) != wide {
		t.Errorf("wide array: %v", err)
	}
}

// A large object with keys out of order is sorted once, and a duplicate
// anywhere in it is found (the old implementation compared every key with
// every other).
func TestCanonicalJSONLargeObject(t *testing.T) {
	t.Parallel()
	const n = 100000
	var in, want strings.Builder
	in.WriteString("{")
	want.WriteString("{")
	for i := range n {
		if i > 0 {
			in.WriteString(",")
			want.WriteString(",")
		}
		fmt.Fprintf(&in, `"k%06d":[%d]`, n-1-i, n-1-i)
		fmt.Fprintf(&want, `"k%06d":[%d]`, i, i)
	}
	got, err := idem.CanonicalJSON([]byte(in.String() + "}"))
	if err != nil || string(got) != want.String()+"}" {
		t.Fatalf("reversed object: %v", err)
	}
	if _, err := idem.CanonicalJSON([]byte(in.String() + `,"k050000":0}`)); !errors.Is(err, idem.ErrInvalidJSON) {
		t.Fatalf("duplicate key: got %v, want ErrInvalidJSON", err)
	}
}

// Lone surrogate escapes keep their identity, as lowercase \uXXXX escapes;
// raw bytes that are not UTF-8 make the body invalid JSON.
func TestCanonicalJSONUnicode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`"\ud800"`:             `"\ud800"`,
		`"\uD800"`:             `"\ud800"`,
		`"\udbff"`:             `"\udbff"`,
		`"\udc00"`:             `"\udc00"`,
		`"\uDFFF"`:             `"\udfff"`,
		`"\ud800\ud800"`:       `"\ud800\ud800"`,
		`"\udc00\ud800"`:       `"\udc00\ud800"`,
		`"\ud800\u0041"`:       `"\ud800A"`,
		`"\ud800x"`:            `"\ud800x"`,
		`"x\udbff"`:            `"x\udbff"`,
		`"\ud83d\ude00"`:       `"😀"`,
		`"\ud800\ud83d\ude00"`: `"\ud800😀"`,
		`"\ufffd"`:             "\"\ufffd\"",
		`{"\udbff":1,"\ud800":2,"\ufffd":3,"\ud7ff":4}`: "{\"\ud7ff\":4,\"\\ud800\":2,\"\\udbff\":1,\"\ufffd\":3}",
	} {
		got, err := idem.CanonicalJSON([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %s (%v), want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"\"\xff\"", "\"\xfe\"", "\"a\xc3\"", "\"\xed\xa0\x80\"", "\"\xc0\x80\"",
		"\"\xf4\x90\x80\x80\"", "{\"\xff\":1}", "[\"ok\",\"\x80\"]", `{"\ud800":1,"\uD800":2}`} {
		if _, err := idem.CanonicalJSON([]byte(in)); !errors.Is(err, idem.ErrInvalidJSON) {
			t.Errorf("%q: got %v, want ErrInvalidJSON", in, err)
		}
	}
}

// Different bytes never share a fingerprint unless they are the same JSON
// value; equivalent spellings of one value always do.
func TestPayloadFingerprintUnicode(t *testing.T) {
	t.Parallel()
	differ := [][2]string{
		{`"\ud800"`, `"\udbff"`},
		{`{"s":"\ud800"}`, `{"s":"\udbff"}`},
		{`"\udc00"`, `"\udfff"`},
		{`"\ud800"`, `"\ufffd"`},
		{`"\ud800"`, "\"\ufffd\""},
		{"\"\xff\"", "\"\xfe\""},
		{"{\"s\":\"\xff\"}", "{\"s\":\"\xfe\"}"},
		{"\"\xff\"", `"\ufffd"`},
		{"\"\xff\"", "\"\ufffd\""},
		{`{"\ud800":1,"\udbff":2}`, `{"\udbff":1,"\ud800":2}`},
	}
	for _, p := range differ {
		if fpmatch.Payload([]byte(p[0])) == fpmatch.Payload([]byte(p[1])) {
			t.Errorf("%q and %q share a fingerprint", p[0], p[1])
		}
	}
	same := [][2]string{
		{`"\u00e9"`, `"é"`},
		{`"\u00E9"`, `"é"`},
		{`"\/"`, `"/"`},
		{`"\u0041"`, `"A"`},
		{`"\uD800"`, `"\ud800"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{"\"\u2028\"", `"\u2028"`},
		{`"\u0008"`, `"\b"`},
		{`{"a":"\u00e9","b":"\/"}`, `{ "b" : "/", "a" : "é" }`},
	}
	for _, p := range same {
		if fpmatch.Payload([]byte(p[0])) != fpmatch.Payload([]byte(p[1])) {
			t.Errorf("%q and %q are one value but have different fingerprints", p[0], p[1])
		}
	}
}

func TestPayloadFingerprint(t *testing.T) {
	t.Parallel()
	a := fpmatch.Payload([]byte(`{"amount":10,"currency":"EUR"}`))
	b := fpmatch.Payload([]byte(`{ "currency": "EUR", "amount": 10 }`))
	c := fpmatch.Payload([]byte(`{"amount":11,"currency":"EUR"}`))
	if a != b {
		t.Error("reordered JSON must have the same fingerprint")
	}
	if a == c {
		t.Error("different JSON must have different fingerprints")
	}
	raw1 := fpmatch.Payload([]byte("not json"))
	raw2 := fpmatch.Payload([]byte("not  json"))
	if raw1 == raw2 {
		t.Error("raw payloads are compared byte for byte")
	}
	// A JSON string and the same bytes raw must not collide.
	if fpmatch.Payload([]byte(`"x"`)) == idem.FingerprintOf([]byte("raw"), []byte(`"x"`)) {
		t.Error("JSON and raw fingerprints share a domain")
	}
	if idem.FingerprintOf([]byte("ab"), []byte("c")) == idem.FingerprintOf([]byte("a"), []byte("bc")) {
		t.Error("FingerprintOf parts are not length-prefixed")
	}
	f, err := fingerprint.FromBytes(a.Bytes())
	if err != nil || f != a || len(a.String()) != 64 || len(a.Short()) != 12 {
		t.Errorf("round trip: %v %v", f, err)
	}
	if _, err := fingerprint.FromBytes([]byte{1, 2}); err == nil {
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
		if got := fingerprint.IsJSONContentType(ct); got != want {
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
		fmt.Errorf("handler: %w", &idem.PanicError{Value: "boom"}): "panic",
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
		if err := checks.ID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range bad {
		if err := checks.ID(id); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%q accepted", id)
		}
	}
}

// FingerprintOf and the Fingerprinter are SHA-256 over each part's length
// (8 bytes, big-endian) and bytes, computed here independently: stored
// fingerprints depend on that form.
func TestFingerprintOfForm(t *testing.T) {
	long := strings.Repeat("0123456789", 20) // longer than the scratch buffer
	parts := [][]byte{[]byte("POST"), {}, []byte(long), []byte("json"), []byte(`{"a":1}`)}
	var flat []byte
	for _, p := range parts {
		flat = binary.BigEndian.AppendUint64(flat, uint64(len(p)))
		flat = append(flat, p...)
	}
	want := idem.Fingerprint(sha256.Sum256(flat))
	if got := idem.FingerprintOf(parts...); got != want {
		t.Fatalf("FingerprintOf %s, want %s", got, want)
	}
	f := fingerprint.New()
	f.AddString("POST")
	f.Add(nil)
	f.AddString(long)
	f.Add([]byte("json"))
	f.AddString(`{"a":1}`)
	if got := f.Sum(); got != want {
		t.Fatalf("Fingerprinter %s, want %s", got, want)
	}
}
