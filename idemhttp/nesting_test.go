package idemhttp_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// Bodies nested far beyond idem.MaxJSONDepth are fingerprinted as raw bytes
// at the cost of reading them. Before, 4 MiB of "[" overflowed the stack in
// the fingerprint and killed the process; 1 MiB cost 1.4 s of CPU and
// 256 MiB of stack. Not parallel: it measures the process.
func TestDeepJSONBodiesAreCheap(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { deepBodies(t, d.D) }, testdb.Serial)
}

// discardApp serves POST /orders behind a fresh middleware on d: the
// handler reads the body, keeps nothing, and answers 201 with the execution
// number and the body's length.
func discardApp[TTx any](t *testing.T, d store.Driver[TTx], cfg idemhttp.Config) (http.Handler, *atomic.Int64) {
	cfg.Tenant = func(*http.Request) (string, error) { return "acme", nil }
	mw, err := idemhttp.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	execs := new(atomic.Int64)
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"exec":%d,"bytes":%d}`, execs.Add(1), n)
	})))
	return mux, execs
}

func deepBodies[TTx any](t *testing.T, d store.Driver[TTx]) {
	const (
		clients   = 8
		size      = 4 << 20
		maxGrowth = 100 << 20
	)
	if _, err := vmRSS(); err != nil {
		t.Skipf("cannot measure RSS: %v", err)
	}
	mux, execs := discardApp(t, d, idemhttp.Config{MaxBodyBytes: 8 << 20})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := srv.Client()
	post := func(key, body string) (*http.Response, string, time.Duration) {
		t.Helper()
		start := time.Now()
		rq, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return nil, "", 0
		}
		rq.Header.Set("Content-Type", "application/json")
		rq.Header.Set("Idempotency-Key", key)
		res, err := client.Do(rq)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return nil, "", 0
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Errorf("%s: %v", key, err)
		}
		return res, string(b), time.Since(start)
	}

	// Warm up the pool, the server and the client's connections.
	var warm sync.WaitGroup
	for i := range clients {
		warm.Go(func() {
			if res, body, _ := post(fmt.Sprint("warm-", i), `{"b":[1],"a":2}`); res != nil && res.StatusCode != http.StatusCreated {
				t.Errorf("warm-up: %d %s", res.StatusCode, body)
			}
		})
	}
	warm.Wait()
	if t.Failed() {
		t.FailNow()
	}

	deep := strings.Repeat("[", size)
	if raceEnabled() {
		// Under the race detector RSS counts shadow memory too, so the
		// bound is checked on the Go heap, with a tighter GC so that the
		// heap measures what the requests hold rather than GC slack.
		defer debug.SetGCPercent(debug.SetGCPercent(25))
	}
	runtime.GC()
	debug.FreeOSMemory()
	baseRSS, _ := vmRSS()
	baseHeap := heapBytes()
	var peakRSS, peakHeap atomic.Int64
	peakRSS.Store(baseRSS)
	peakHeap.Store(baseHeap)
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if r, _ := vmRSS(); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			if h := heapBytes(); h > peakHeap.Load() {
				peakHeap.Store(h)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	var wg sync.WaitGroup
	var took [clients]time.Duration
	for i := range clients {
		wg.Go(func() {
			res, body, d := post(fmt.Sprint("deep-", i), deep)
			took[i] = d
			if res != nil && (res.StatusCode != http.StatusCreated || !strings.Contains(body, fmt.Sprintf(`"bytes":%d`, size))) {
				t.Errorf("deep-%d: %d %s", i, res.StatusCode, body)
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()

	rssGrowth, heapGrowth := peakRSS.Load()-baseRSS, peakHeap.Load()-baseHeap
	t.Logf("%d × %d MiB of '[': took %v; peak RSS +%d MiB, peak heap +%d MiB (race detector: %v)",
		clients, size>>20, took, rssGrowth>>20, heapGrowth>>20, raceEnabled())
	// The time each took is logged, not asserted: timing depends on the
	// machine's load (the guarantee checked is memory: bounded growth, no
	// quadratic copy).
	if heapGrowth >= maxGrowth {
		t.Errorf("heap grew by %d MiB, want under %d MiB", heapGrowth>>20, maxGrowth>>20)
	}
	if rssGrowth >= maxGrowth && !raceEnabled() {
		t.Errorf("RSS grew by %d MiB, want under %d MiB", rssGrowth>>20, maxGrowth>>20)
	}

	// Still up, and the raw fingerprint holds: the same bytes replay, other
	// bytes under the same key are refused.
	res, body, _ := post("deep-0", deep)
	if res != nil && (res.StatusCode != http.StatusCreated || res.Header.Get(idemhttp.HeaderReplayed) != "true") {
		t.Errorf("retry of deep-0: %d %q %s, want a replay", res.StatusCode, res.Header.Get(idemhttp.HeaderReplayed), body)
	}
	res, body, _ = post("deep-0", deep[:size-1]+"]")
	if res != nil && res.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("other deep body under deep-0: %d %s, want 422", res.StatusCode, body)
	}
	if n := execs.Load(); n != 2*clients {
		t.Errorf("handler ran %d times, want %d", n, 2*clients)
	}
}

// Lone surrogates and bytes that are not UTF-8 no longer collapse into
// U+FFFD: a different string under the same key is refused, and another
// spelling of the same string replays.
func TestUnicodeBodiesKeepTheirIdentity(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { unicodeBodies(t, d.D) })
}

func unicodeBodies[TTx any](t *testing.T, d store.Driver[TTx]) {
	h, execs := discardApp(t, d, idemhttp.Config{})
	cases := []struct{ key, first, other, same string }{
		{"surrogate", `{"s":"\ud800"}`, `{"s":"\udbff"}`, `{ "s" : "\uD800" }`},
		{"low-surrogate", `["\udc00"]`, `["\udfff"]`, `[ "\uDC00" ]`},
		{"surrogate-vs-fffd", `{"s":"\ud800"}`, `{"s":"\ufffd"}`, `{"s":"\ud800"}`},
		{"invalid-utf8", "{\"s\":\"\xff\"}", "{\"s\":\"\xfe\"}", "{\"s\":\"\xff\"}"},
		{"invalid-vs-fffd", "{\"s\":\"\xff\"}", "{\"s\":\"\ufffd\"}", "{\"s\":\"\xff\"}"},
		{"escapes", `{"s":"\u00e9\/","t":1}`, `{"s":"e/","t":1}`, `{"t":1,"s":"é/"}`},
	}
	for _, c := range cases {
		first := do(h, req{key: c.key, body: c.first})
		wantStatus(t, first, http.StatusCreated)
		wantProblem(t, do(h, req{key: c.key, body: c.other}), http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		wantReplay(t, do(h, req{key: c.key, body: c.same}), first)
	}
	if n := execs.Load(); n != int64(len(cases)) {
		t.Fatalf("handler ran %d times, want %d", n, len(cases))
	}
}

// vmRSS returns the process's resident set size from /proc/self/status.
func vmRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := bytes.CutPrefix(s.Bytes(), []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/self/status")
}

// heapBytes returns the bytes of the Go heap in use (live and not yet
// collected objects), without stopping the world.
func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
