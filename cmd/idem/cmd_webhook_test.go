package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/webhook"
)

// shellWords splits a command line printed by idem: bare words and
// single-quoted words (with the '\” escape), separated by spaces.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, inWord = true, true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case c == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// curlRequest turns a printed "curl -i -X POST URL -H … --data-binary …"
// command into the request it sends.
func curlRequest(t *testing.T, line string) *http.Request {
	t.Helper()
	w := shellWords(t, strings.TrimSpace(line))
	if len(w) < 5 || w[0] != "curl" || w[1] != "-i" || w[2] != "-X" || w[3] != "POST" {
		t.Fatalf("not a curl POST: %q", line)
	}
	req, err := http.NewRequest("POST", w[4], nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 5; i < len(w); i += 2 {
		if i+1 >= len(w) {
			t.Fatalf("dangling %q in %q", w[i], line)
		}
		switch w[i] {
		case "-H":
			k, v, ok := strings.Cut(w[i+1], ": ")
			if !ok {
				t.Fatalf("header %q", w[i+1])
			}
			req.Header.Add(k, v)
		case "--data-binary":
			body := []byte(w[i+1])
			if name, ok := strings.CutPrefix(w[i+1], "@"); ok {
				if body, err = os.ReadFile(name); err != nil {
					t.Fatal(err)
				}
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
		default:
			t.Fatalf("unexpected %q in %q", w[i], line)
		}
	}
	return req
}

func verifyBody(t *testing.T, req *http.Request) []byte {
	t.Helper()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return body
}

// TestWebhookSign: "idem webhook sign" prints the same headers as the
// library's Standard signer, for a body from --data, @FILE or stdin, and a
// curl command whose request the library verifies.
func TestWebhookSign(t *testing.T) {
	t.Parallel()
	lib, err := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"type":"payment.succeeded","data":{"order_id":"o'1"}}`
	want := http.Header{}
	if err := lib.Sign(want, webhook.Delivery{ID: "msg_1", Timestamp: time.Unix(1700000000, 0)}, []byte(body)); err != nil {
		t.Fatal(err)
	}
	wantText := "webhook-id: msg_1\nwebhook-timestamp: 1700000000\nwebhook-signature: " + want.Get("webhook-signature") + "\n"
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fixed := []string{"--id", "msg_1", "--timestamp", "1700000000"}
	for name, c := range map[string]struct {
		args  []string
		stdin string
		vars  map[string]string
	}{
		"data":        {args: append([]string{"webhook", "sign", "--secret", testSecret, "--data", body}, fixed...)},
		"file":        {args: append(append([]string{"webhook", "sign"}, fixed...), "--data", "@"+file, "--secret", testSecret)},
		"stdin":       {args: append([]string{"webhook", "sign"}, fixed...), stdin: body, vars: map[string]string{"IDEM_WEBHOOK_SECRET": testSecret}},
		"flags first": {args: append(append([]string{"webhook", "--secret", testSecret, "--data", body}, fixed...), "sign")},
	} {
		var out, errb bytes.Buffer
		vars := c.vars
		env := &Env{Stdin: strings.NewReader(c.stdin), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }}
		if code := run(context.Background(), env, c.args); code != 0 || out.String() != wantText {
			t.Errorf("%s: exit %d: stdout %q, want %q; stderr %s", name, code, out.String(), wantText, errb.String())
		}
	}

	// --curl: the printed command's request verifies now (default
	// timestamp) and carries the body exactly, quote included.
	for _, data := range []string{body, "@" + file} {
		code, out, stderr := runCmd(t, map[string]string{}, "webhook", "sign", "--secret", testSecret, "--data", data, "--curl", "http://127.0.0.1:1/webhooks/payments")
		if code != 0 || strings.Count(out, "\n") != 1 || strings.Contains(out, testSecret) {
			t.Fatalf("--curl %s: exit %d: %q %s", data, code, out, stderr)
		}
		req := curlRequest(t, out)
		got := verifyBody(t, req)
		if string(got) != body || req.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("curl body %q, headers %v", got, req.Header)
		}
		d, err := lib.Verify(req, got, time.Now())
		if err != nil || !strings.HasPrefix(d.ID, "msg_") {
			t.Fatalf("the printed request does not verify: %v (%+v)", err, d)
		}
	}
}

// TestWebhookSignV1a: --key (or IDEM_WEBHOOK_SIGNING_KEY) adds a v1a
// Ed25519 signature that a receiver holding only the public key accepts.
func TestWebhookSignV1a(t *testing.T) {
	t.Parallel()
	signingKey, publicKey, err := webhook.GenerateStandardKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := webhook.NewStandard(webhook.StandardConfig{PublicKeys: []string{publicKey}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args    []string
		vars    map[string]string
		entries int
	}{
		{[]string{"--key", signingKey}, nil, 1},
		{nil, map[string]string{"IDEM_WEBHOOK_SIGNING_KEY": signingKey}, 1},
		{[]string{"--key", signingKey, "--secret", testSecret}, nil, 2},
	} {
		args := append([]string{"webhook", "sign", "--data", `{"a":1}`, "--curl", "http://127.0.0.1:1/hook"}, c.args...)
		code, out, stderr := runCmd(t, c.vars, args...)
		if code != 0 || strings.Contains(out, strings.TrimPrefix(signingKey, "whsk_")) {
			t.Fatalf("%q: exit %d: %q %s", args, code, out, stderr)
		}
		req := curlRequest(t, out)
		if n := len(strings.Fields(req.Header.Get("webhook-signature"))); n != c.entries || !strings.Contains(req.Header.Get("webhook-signature"), "v1a,") {
			t.Fatalf("%q: webhook-signature %q", args, req.Header.Get("webhook-signature"))
		}
		if _, err := receiver.Verify(req, verifyBody(t, req), time.Now()); err != nil {
			t.Fatalf("%q: v1a does not verify with the public key: %v", args, err)
		}
	}
	if code, _, stderr := runCmd(t, nil, "webhook", "sign", "--key", "whsk_bm9wZQ==", "--data", "x"); code != 2 || !strings.Contains(stderr, "--key") {
		t.Fatalf("bad --key: exit %d: %s", code, stderr)
	}
}

// startDemoText runs "idem demo" in-process with args and returns its URL
// and its whole start-up text.
func startDemoText(t *testing.T, getenv func(string) string, args ...string) (string, string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	env := &Env{Stdout: pw, Stderr: io.Discard, Getenv: getenv}
	go func() {
		err := runDemo(ctx, env, append([]string{"--addr", "127.0.0.1:0"}, args...))
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	var text strings.Builder
	for sc.Scan() {
		text.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	first, _, _ := strings.Cut(text.String(), "\n")
	i := strings.Index(first, "http://")
	if i < 0 {
		t.Fatalf("demo start-up: %q: %v", text.String(), stop())
	}
	t.Cleanup(func() { _ = stop() })
	return first[i:], text.String(), stop
}

// TestDemoPrintsSignedWebhook: the demo's start-up text shows an "idem
// webhook sign … --curl …" command line; run as printed (with a real order
// id), its curl request is accepted by the demo's receiver, pays the order,
// and a second run is a replay (item 25).
func TestDemoPrintsSignedWebhook(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "fresh", "data")
	url, text, stop := startDemoText(t, func(string) string { return "" }, "--data", data)
	if fi, err := os.Stat(data); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("demo data directory: %v, mode %v; want no group/other access", err, fi.Mode())
	}
	if !strings.Contains(text, "webhook secret: whsec_") || !strings.Contains(text, "generated") {
		t.Fatalf("a generated secret is shown once: %s", text)
	}
	var signLine string // from "webhook sign" on, without "idem" or "go run ./cmd/idem"
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		for _, prefix := range []string{"idem ", "go run ./cmd/idem "} {
			if rest, ok := strings.CutPrefix(l, prefix); ok && strings.HasPrefix(rest, "webhook sign ") {
				signLine = rest
			}
		}
	}
	signLine, piped := strings.CutSuffix(signLine, " | sh")
	if signLine == "" || !piped || !strings.Contains(signLine, "--curl "+url+"/webhooks/payments") {
		t.Fatalf("no \"idem webhook sign … --curl … | sh\" line: %s", text)
	}
	first := call(t, "POST", url+"/orders", map[string]string{"Idempotency-Key": "order-1", "Content-Type": "application/json"},
		`{"event_id":"concert-1","customer_email":"ana@example.com","seats":2,"total_cents":9000,"currency":"EUR"}`)
	var o struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(first.body, &o); err != nil || first.status != 201 {
		t.Fatalf("order: %d %s", first.status, first.body)
	}
	words := shellWords(t, signLine)
	for i, w := range words {
		words[i] = strings.ReplaceAll(w, "ORDER_ID", o.OrderID)
	}
	for attempt, want := range []int{http.StatusAccepted, http.StatusOK} {
		code, curl, stderr := runCmd(t, map[string]string{}, words...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", words, code, stderr)
		}
		resp, err := http.DefaultClient.Do(curlRequest(t, curl))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 || (attempt == 1 && resp.StatusCode != want) {
			t.Fatalf("delivery %d of the printed webhook: %d %s", attempt+1, resp.StatusCode, b)
		}
	}
	if r := call(t, "GET", url+"/orders/"+o.OrderID, nil, ""); !strings.Contains(string(r.body), `"status":"paid"`) {
		t.Fatalf("order not paid by the printed webhook: %s", r.body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
