package idemhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// encodeHeaders writes exactly what json.Marshal writes for the
// http.Header of the stored names, plain or not (escapes, non-ASCII, nil
// and empty value lists, skipped names, names absent from h).
func TestEncodeHeadersIsJSONMarshal(t *testing.T) {
	names := sortedNames([]string{"Location", "Content-Type", "X-A", "Content-Length", "X-A", "X-Absent"})
	cases := []http.Header{
		{},
		{"Content-Type": {"application/json"}, "Location": {"/orders/0192"}},
		{"X-A": {"1", "2", ""}, "Content-Length": {"12"}, "Other": {"not stored"}},
		{"X-A": {}},
		{"X-A": nil},
		{"X-A": {"<b>&"}},
		{"X-A": {`a"b\c`}},
		{"X-A": {"é", "\u2028"}},
		{"X-A": {"\x01\x7f"}},
		{"X-A": {"\xff"}},
		{"Location": {"/a?b=c d"}, "Content-Type": {"text/plain; charset=utf-8"}},
	}
	for _, skip := range []func(string) bool{keepAll, bodyHeader} {
		for _, h := range cases {
			stored := http.Header{}
			for _, k := range names {
				if v, ok := h[k]; ok && !skip(k) {
					stored[k] = v
				}
			}
			want, _ := json.Marshal(stored)
			if got := encodeHeaders(h, names, skip); got != string(want) {
				t.Errorf("%#v: %s, json.Marshal writes %s", h, got, want)
			}
		}
	}
}

// The request fingerprint is the SHA-256 of these parts, in this order:
// stored records match only while it stays so. The media type part
// ("type", the Content-Type without parameters) is the one change since
// the request target: without it the same bytes as form data and as
// text/plain replayed each other (see CHANGELOG.md for what a retry that
// spans that upgrade gets).
func TestFingerprintParts(t *testing.T) {
	m := &Middleware[any]{cfg: Config{FingerprintHeaders: []string{"X-B", "X-A"}, ExcludeQuery: []string{"cb"}}}
	long := strings.Repeat("/seg", 40) // longer than the fingerprinter's scratch
	r := httptest.NewRequest(http.MethodPost, long+"?b=2&a=1&cb=9", nil)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Add("X-A", "1")
	r.Header.Add("X-A", "2")
	body := []byte(`{"b":1, "a":2}`)
	c, err := idem.CanonicalJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	want := idem.FingerprintOf([]byte("POST"), []byte("POST op"), []byte("path"), []byte(long), []byte("query"), []byte("a=1&b=2"),
		[]byte("type"), []byte("application/json"), []byte("json"), c, []byte("X-B"), []byte(""), []byte("X-A"), []byte("1\x002"))
	m.cfg.FingerprintHeaders = []string{"X-B", "X-A"}
	if got := m.fingerprint(r, "POST op", body); got != want {
		t.Fatalf("fingerprint %s, want %s", got, want)
	}
	raw := idem.FingerprintOf([]byte("POST"), []byte("POST op"), []byte("path"), []byte(long), []byte("query"), []byte("a=1&b=2"),
		[]byte("type"), []byte("text/plain"), []byte("raw"), []byte("x"), []byte("X-B"), []byte(""), []byte("X-A"), []byte("1\x002"))
	r.Header.Set("Content-Type", "Text/Plain; charset=utf-8")
	if got := m.fingerprint(r, "POST op", []byte("x")); got != raw {
		t.Fatalf("raw fingerprint %s, want %s", got, raw)
	}
}
