package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/store"
)

// httpClients is the number of concurrent clients of the HTTP pairs.
const httpClients = 32

// httpServer serves h on a loopback port until the returned stop is called.
func httpServer(h http.Handler) (url string, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := httpserver.New("", h)
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	}, nil
}

func httpClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 2 * httpClients, MaxIdleConnsPerHost: 2 * httpClients, IdleConnTimeout: time.Minute,
	}}
}

// post sends one POST with key (none when empty) and checks the status.
func post(ctx context.Context, c *http.Client, url, key string, want int, replayed bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s key %q: status %d, want %d", url, key, resp.StatusCode, want)
	}
	switch got := resp.Header.Get("Idempotent-Replayed") == "true"; {
	case replayed && !got:
		return fmt.Errorf("POST %s key %q: not replayed", url, key)
	case !replayed && got && key != "":
		// A key meant to execute was answered from a stored response:
		// the side would measure replays, not executions.
		return fmt.Errorf("POST %s key %q: replayed, want a new execution", url, key)
	}
	return nil
}

// httpPairs returns http_vs_plain (a handler doing one INSERT, with the
// Idempotency-Key middleware and a new key per request, against the same
// handler without it) and http_replay_vs_execute (replaying a stored
// response against executing a new key), clients concurrent clients
// (httpClients in the suite) over loopback.
func httpPairs[TTx any](e *Env, d store.Driver[TTx], storeName string, clients int) []Pair {
	var (
		idemURL, plainURL string
		stops             []func() error
		seq               atomic.Int64
		replayKeys        []string
	)
	c := httpClient()
	// Keys are unique per call, not only per run: --scale builds these
	// pairs once per concurrency level in one run, and a key of an earlier
	// level would be replayed instead of executed.
	tag := e.name("h")
	closeAll := func() error {
		var err error
		for _, s := range stops {
			err = s()
		}
		stops = nil
		c.CloseIdleConnections()
		return err
	}
	setup := func(ctx context.Context) error {
		if idemURL != "" {
			return nil
		}
		insert, err := businessTable(ctx, d, e.name("rows_http"))
		if err != nil {
			return err
		}
		mw, err := idemhttp.New(d, idemhttp.Config{})
		if err != nil {
			return err
		}
		// Inside the middleware: the INSERT joins the key record's transaction.
		inTx := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, ok := idemhttp.Tx[TTx](r.Context())
			if !ok {
				http.Error(w, "no transaction", http.StatusInternalServerError)
				return
			}
			body, _ := io.ReadAll(r.Body)
			id := "h-" + strconv.FormatInt(seq.Add(1), 10)
			if _, err := d.Tx(tx).Exec(r.Context(), insert, id, body, store.Micros(time.Now())); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%q}`, id)
		})
		// Plain: the same INSERT in a transaction of its own.
		plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			id := "h-" + strconv.FormatInt(seq.Add(1), 10)
			err := store.InTx(r.Context(), d, func(tx TTx) error {
				_, err := d.Tx(tx).Exec(r.Context(), insert, id, body, store.Micros(time.Now()))
				return err
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%q}`, id)
		})
		mux := http.NewServeMux()
		mux.Handle("POST /orders", mw.Handler(inTx))
		mux.Handle("POST /plain/orders", plain)
		url, stop, err := httpServer(mux)
		if err != nil {
			return err
		}
		stops = append(stops, stop)
		e.closers = append(e.closers, closeAll)
		idemURL, plainURL = url+"/orders", url+"/plain/orders"
		// Keys whose responses are stored, for the replay side.
		for i := range 1000 {
			replayKeys = append(replayKeys, "replay-"+e.runID+"-"+tag+"-"+strconv.Itoa(i))
		}
		var i atomic.Int64
		_, err = throughput(ctx, time.Hour, httpClients, func(ctx context.Context, _ int) (int, error) {
			n := int(i.Add(1)) - 1
			if n >= len(replayKeys) {
				return 0, errDone
			}
			return 1, post(ctx, c, idemURL, replayKeys[n], http.StatusCreated, false)
		})
		if errors.Is(err, errDone) {
			err = nil
		}
		return err
	}
	execute := func(ctx context.Context, budget time.Duration) (Sample, error) {
		return throughput(ctx, budget, clients, func(ctx context.Context, _ int) (int, error) {
			return 1, post(ctx, c, idemURL, "k-"+e.runID+"-"+tag+"-"+strconv.FormatInt(seq.Add(1), 10), http.StatusCreated, false)
		})
	}
	vsPlain := Pair{Name: "http_vs_plain_" + storeName, Setup: setup,
		A: Side{Label: "idempotency-key", Run: execute},
		B: Side{Label: "plain", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
			return throughput(ctx, budget, clients, func(ctx context.Context, _ int) (int, error) {
				return 1, post(ctx, c, plainURL, "", http.StatusCreated, false)
			})
		}},
	}
	var next atomic.Int64
	replay := Pair{Name: "http_replay_vs_execute_" + storeName, Setup: setup, Close: closeAll,
		A: Side{Label: "replay", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
			return throughput(ctx, budget, clients, func(ctx context.Context, _ int) (int, error) {
				k := replayKeys[int(next.Add(1))%len(replayKeys)]
				return 1, post(ctx, c, idemURL, k, http.StatusCreated, true)
			})
		}},
		B: Side{Label: "execute", Run: execute},
	}
	return []Pair{vsPlain, replay}
}
