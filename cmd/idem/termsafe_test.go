package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/sqlstore"
)

func TestTermSafe(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"plain text, é, 日本, \\x1b stays", "plain text, é, 日本, \\x1b stays"},
		{"a\nb\tc\rd", `a\nb\tc\rd`},
		{"\x1b]52;c;cHduZWQ=\x07", `\x1b]52;c;cHduZWQ=\x07`},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"\x00\x7f", `\x00\x7f`},
		{"\u009b31m\u0085", `\u009b31m\u0085`},
		{"\xff\xfe ok \xc3", `\xff\xfe ok \xc3`},
		{"abc\u202edcba\u2066\u2028", `abc\u202edcba\u2066\u2028`},
	}
	for _, c := range cases {
		if got := termSafe(c.in); got != c.want {
			t.Errorf("termSafe(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzTermSafe: the result never holds a byte or character a terminal acts
// on, and escaping is idempotent.
func FuzzTermSafe(f *testing.F) {
	for _, s := range []string{"\x1b]0;x\x07", "\u009b", "\xff", "ok", "\u202e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := termSafe(s)
		if !utf8.ValidString(got) {
			t.Fatalf("termSafe(%q) = %q is not UTF-8", s, got)
		}
		for _, r := range got {
			if unsafeRune(r) {
				t.Fatalf("termSafe(%q) = %q keeps %U", s, got, r)
			}
		}
		if termSafe(got) != got {
			t.Fatalf("termSafe is not idempotent on %q", s)
		}
	})
}

// hostile is stored data carrying terminal controls: OSC 52 (write the
// clipboard), a screen clear, a C1 CSI, a title change, a bidi override and
// invalid UTF-8 for the fields that may hold it.
const hostile = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\u009b31m\x1b]0;owned\x07\u202e"

// assertNoControls fails t if s holds any raw control a terminal acts on
// (newlines, used by the layout itself, excepted).
func assertNoControls(t *testing.T, what, s string) {
	t.Helper()
	for i, r := range s {
		if r != '\n' && unsafeRune(r) {
			t.Fatalf("%s prints raw %U at byte %d: %q", what, r, i, s)
		}
	}
}

// TestDLQAndKeysEscapeStoredControls: human output of dlq list/show, keys
// show and stats escapes the controls in stored data; --json stays exact
// (item 12).
func TestDLQAndKeysEscapeStoredControls(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + path}
	if code, _, stderr := runCmd(t, vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	letters, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"note":"` + hostile + `"}`)
	msg := idem.Message{ID: "id" + hostile, Subject: "orders", Payload: payload, Attempt: 1,
		Headers: map[string]string{"X-Note": hostile}}
	if _, err := letters.Park(ctx, dlq.FromMessage("billing"+hostile, msg, idem.Permanent(errors.New("bad "+hostile)))); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCmd(t, vars, "dlq", "list")
	if code != 0 || !strings.Contains(out, `billing\x1b]52;c;`) {
		t.Fatalf("list: exit %d: %q %s", code, out, stderr)
	}
	assertNoControls(t, "dlq list", out)
	code, out, stderr = runCmd(t, vars, "dlq", "show", "1")
	if code != 0 || !strings.Contains(out, `\x1b[2J\u009b31m`) {
		t.Fatalf("show: exit %d: %q %s", code, out, stderr)
	}
	assertNoControls(t, "dlq show", out)
	code, out, _ = runCmd(t, vars, "dlq", "show", "1", "--json")
	var l dlq.Letter
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || string(l.Payload) != string(payload) || l.Consumer != "billing"+hostile {
		t.Fatalf("show --json is not exact: %v %q", err, out)
	}
	code, out, _ = runCmd(t, vars, "stats")
	if code != 0 || !strings.Contains(out, `consumer billing\x1b`) {
		t.Fatalf("stats: %q", out)
	}
	assertNoControls(t, "stats", out)

	// A stored HTTP response with controls in its body.
	mw, err := idemhttp.New(d, idemhttp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("created " + hostile + "\n"))
	})))
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`))
	r.Header.Set("Idempotency-Key", "k-1")
	rw := httptest.NewRecorder()
	mux.ServeHTTP(rw, r)
	if rw.Code != http.StatusCreated {
		t.Fatalf("POST /orders: %d %s", rw.Code, rw.Body)
	}
	code, out, stderr = runCmd(t, vars, "keys", "show", "k-1", "--operation", "POST /orders")
	if code != 0 || !strings.Contains(out, `created \x1b]52;c;`) {
		t.Fatalf("keys show: exit %d: %q %s", code, out, stderr)
	}
	assertNoControls(t, "keys show", out)
	code, out, _ = runCmd(t, vars, "keys", "show", "k-1", "--operation", "POST /orders", "--json")
	var rec struct{ Body string }
	if err := json.Unmarshal([]byte(out), &rec); code != 0 || err != nil || rec.Body != "created "+hostile+"\n" {
		t.Fatalf("keys show --json is not exact: %v %q", err, out)
	}
}
