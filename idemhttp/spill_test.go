package idemhttp_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
)

// pattern writes n bytes of a repeating pattern in 32 KiB chunks and
// returns the SHA-256 of what it wrote.
func pattern(w io.Writer, n int) (sum [32]byte, err error) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 2048)
	h := sha256.New()
	for n > 0 {
		c := chunk[:min(n, len(chunk))]
		if _, err = w.Write(c); err != nil {
			return sum, err
		}
		h.Write(c)
		n -= len(c)
	}
	h.Sum(sum[:0])
	return sum, nil
}

// wantSpillDirClean: the spill directory holds no file other users could
// read: nothing, or (allowPrivate, while a response is being buffered)
// only files of mode 0600. It reports with t.Errorf, so a handler running
// on a server goroutine may call it.
func wantSpillDirClean(t *testing.T, dir string, allowPrivate bool) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Error(err)
		return
	}
	for _, de := range ents {
		fi, err := de.Info()
		if err != nil {
			continue
		}
		if !allowPrivate || fi.Mode().Perm() != 0o600 {
			t.Errorf("spill directory holds %s (mode %v)", de.Name(), fi.Mode())
		}
	}
}

// A 64 MiB response is not held in memory: beyond MaxResponseMemory it is
// spilled to a private temporary file until the commit, then streamed to
// the client, which receives it whole; the stored record keeps no body
// (above MaxStoredBody) and the file is gone afterwards. Heap allocation
// during the request stays far below the response size (the old capture
// allocated about twice the response in bytes.Buffer growth).
func TestLargeResponseSpillsToDisk(t *testing.T) {
	const size = 64 << 20
	for _, mode := range []idemhttp.Mode{idemhttp.Transactional, idemhttp.TwoPhase} {
		t.Run(mode.String(), func(t *testing.T) {
			forEachDriver(t, func(t *testing.T, e *env) {
				dir := t.TempDir()
				var wrote [32]byte
				var writeErr error
				a := &app{write: func(w http.ResponseWriter) {
					wrote, writeErr = pattern(w, size)
					wantSpillDirClean(t, dir, true)
				}}
				h := e.handler(t, idemhttp.Config{Mode: mode, MaxResponseMemory: 64 << 10, SpillDir: dir}, a)
				srv := httptest.NewServer(h)
				defer srv.Close()
				post := func() (*http.Response, [32]byte, int64) {
					r, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{}`))
					r.Header.Set("Idempotency-Key", "big")
					r.Header.Set("X-Tenant", "acme")
					r.Header.Set("Content-Type", "application/json")
					resp, err := srv.Client().Do(r)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					hs := sha256.New()
					n, err := io.Copy(hs, resp.Body)
					if err != nil {
						t.Fatal(err)
					}
					var got [32]byte
					hs.Sum(got[:0])
					return resp, got, n
				}
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				resp, got, n := post()
				runtime.ReadMemStats(&after)
				if writeErr != nil {
					t.Fatal(writeErr)
				}
				if resp.StatusCode != 201 || n != size || got != wrote {
					t.Fatalf("client got %d with %d bytes (sha match %v), want 201 with %d", resp.StatusCode, n, got == wrote, size)
				}
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
					t.Fatalf("a %d MiB response allocated %d MiB of heap", size>>20, grew>>20)
				} else {
					t.Logf("a %d MiB response allocated %.1f MiB of heap", size>>20, float64(grew)/(1<<20))
				}
				wantSpillDirClean(t, dir, false)
				rec, err := e.lookup("acme", op, "big")
				if err != nil {
					t.Fatal(err)
				}
				if !rec.BodyOmitted || len(rec.Body) != 0 || rec.Status != 201 {
					t.Fatalf("stored record: status %d, omitted %v, %d body bytes", rec.Status, rec.BodyOmitted, len(rec.Body))
				}
				resp, _, n = post()
				if resp.StatusCode != 201 || n != 0 || resp.Header.Get(idemhttp.HeaderBodyOmitted) != "true" {
					t.Fatalf("replay %d with %d bytes, omitted=%q", resp.StatusCode, n, resp.Header.Get(idemhttp.HeaderBodyOmitted))
				}
				if a.execs.Load() != 1 {
					t.Fatalf("handler ran %d times", a.execs.Load())
				}
			}, testdb.Serial)
		})
	}
}

// A response spilled to disk but within MaxStoredBody is stored and
// replayed byte for byte, with the Content-Type net/http would sniff.
func TestSpilledResponseIsStoredWhole(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		dir := t.TempDir()
		a := &app{write: func(w http.ResponseWriter) {
			w.Header().Del("Content-Type")
			_, _ = pattern(w, 100<<10)
		}}
		h := e.handler(t, idemhttp.Config{MaxResponseMemory: 1 << 10, SpillDir: dir}, a)
		first := do(h, req{tenant: "acme", key: "k", body: `{}`})
		wantStatus(t, first, 201)
		var want bytes.Buffer
		_, _ = pattern(&want, 100<<10)
		if !bytes.Equal(first.Body.Bytes(), want.Bytes()) || first.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("first response: %d bytes, Content-Type %q", first.Body.Len(), first.Header().Get("Content-Type"))
		}
		rec, err := e.lookup("acme", op, "k")
		if err != nil || rec.BodyOmitted || !bytes.Equal(rec.Body, want.Bytes()) {
			t.Fatalf("stored record: %v, omitted %v, %d bytes", err, rec != nil && rec.BodyOmitted, len(rec.Body))
		}
		wantReplay(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), first)
		wantSpillDirClean(t, dir, false)
	})
}

// Above MaxResponseBytes the handler's writes fail with
// ErrResponseTooLarge and the client gets 500 problem+json; in
// transactional mode the handler's work is rolled back and nothing is
// recorded, so a retry executes again.
func TestResponseCap(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		dir := t.TempDir()
		var writeErr error
		a := &app{write: func(w http.ResponseWriter) { _, writeErr = pattern(w, 2<<20) }}
		h := e.handler(t, idemhttp.Config{MaxResponseBytes: 1 << 20, MaxResponseMemory: 64 << 10, SpillDir: dir}, a)
		for i := range 2 {
			w := do(h, req{tenant: "acme", key: "k", body: `{}`})
			wantProblem(t, w, http.StatusInternalServerError, idemhttp.TypeResponseTooLarge)
			if !errors.Is(writeErr, idemhttp.ErrResponseTooLarge) {
				t.Fatalf("handler's write returned %v, want ErrResponseTooLarge", writeErr)
			}
			if n := e.count(t, `SELECT count(*) FROM `+e.keys) + e.count(t, `SELECT count(*) FROM orders`); n != 0 {
				t.Fatalf("%d rows after a response above the cap, want 0", n)
			}
			if a.execs.Load() != int64(i+1) {
				t.Fatalf("attempt %d: handler ran %d times", i+1, a.execs.Load())
			}
		}
		wantSpillDirClean(t, dir, false)

		// Two-phase: the effect happened outside any transaction; the
		// pending record is released like after a 5xx.
		a2 := &app{write: func(w http.ResponseWriter) { _, _ = pattern(w, 2<<20) }}
		h2 := e.handler(t, idemhttp.Config{Mode: idemhttp.TwoPhase, MaxResponseBytes: 1 << 20, SpillDir: dir}, a2)
		wantProblem(t, do(h2, req{tenant: "acme", key: "k2", body: `{}`}), http.StatusInternalServerError, idemhttp.TypeResponseTooLarge)
		if n := e.count(t, `SELECT count(*) FROM `+e.keys); n != 0 {
			t.Fatalf("%d key records after a two-phase response above the cap, want 0", n)
		}
	})
}
