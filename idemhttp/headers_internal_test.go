package idemhttp

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
)

// decodeHeaders gives exactly what json.Unmarshal gives (or fails where it
// fails), whether or not the input takes the fast path.
func checkDecodeHeaders(t *testing.T, s string) {
	t.Helper()
	want := http.Header{}
	werr := json.Unmarshal([]byte(s), &want)
	got := http.Header{}
	gerr := decodeHeaders(s, got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: error %v, json.Unmarshal's %v", s, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: %#v, json.Unmarshal gives %#v", s, got, want)
	}
}

var headerSeeds = []string{
	`{}`, `{"Content-Type":["application/json"],"Location":["/orders/0192"]}`,
	`{"A":[]}`, `{"A":["1","2","3"],"B":["x"]}`, `{"A":[""]}`, `{"":["v"]}`,
	`{"A":null}`, `{"A":["\u003cb\u003e"]}`, `{"A":["a\"b"]}`, `{ "A" : [ "v" ] }`,
	`{"A":["v"],"A":["w"]}`, `{"A":["v"]`, `{"A":["v",]}`, `{"A":["v"],}`, `{"A":"v"}`,
	`{"A":["é"]}`, "{\"A\":[\"\xff\"]}", "{\"A\":[\"\x01\"]}", `{"A":["v"]}x`, `[]`, ``, `{`, `{"A`,
	`{"A":[`, `{"A":["v"`, `{"A":["v"]]}`, `{"A":[1]}`,
}

func TestDecodeHeadersAsJSON(t *testing.T) {
	for _, s := range headerSeeds {
		checkDecodeHeaders(t, s)
	}
	// What the middleware stores takes the fast path.
	stored, _ := json.Marshal(http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/1"}, "X-Many": {"a", "b"}})
	if !plainHeaders(string(stored), http.Header{}) {
		t.Fatalf("%s: not read by the fast path", stored)
	}
}

func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range headerSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkDecodeHeaders(t, s) })
}
