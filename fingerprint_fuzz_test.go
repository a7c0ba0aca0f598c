package idem_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/idemkit/idem"
)

// FuzzCanonicalJSON: canonical output is valid JSON with the same meaning
// as the input, canonicalising it again changes nothing, and the seeds'
// reordered/reformatted variants have one canonical form.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"seat":"A1","qty":2,"meta":{"b":1,"a":[1,2]}}`,
		"{ \"meta\" : {\"a\":[1, 2],\n \"b\":1},\t\"qty\":2, \"seat\":\"A1\" }",
		`{"qty":2}`, `{"qty":3}`, `[]`, `null`, `"x"`, `1.50`, `1e3`, `{"a":1,"a":2}`, `{"a":1} x`,
		`{"<>&":"\u003c\u2028"}`, `{"é":"\u00e9","e":"😀"}`, `[{"b":1,"a":{"d":[],"c":{}}}]`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := idem.CanonicalJSON(data)
		if err != nil {
			return
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q of %q is not valid JSON", c, data)
		}
		c2, err := idem.CanonicalJSON(c)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("not idempotent: %q -> %q (%v)", c, c2, err)
		}
		var a, b any
		da := json.NewDecoder(bytes.NewReader(data))
		da.UseNumber()
		db := json.NewDecoder(bytes.NewReader(c))
		db.UseNumber()
		if da.Decode(&a) != nil || db.Decode(&b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("meaning changed: %q -> %q", data, c)
		}
		if idem.PayloadFingerprint(data) != idem.PayloadFingerprint(c) {
			t.Fatalf("fingerprints differ for %q and its canonical form", data)
		}
	})
}
