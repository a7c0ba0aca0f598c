package idemhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/testdb"
)

// decisions is an observer recording the middleware's decisions in order.
type decisions struct {
	obs.NopObserver
	mu  sync.Mutex
	got []string
}

func (d *decisions) HTTPRequest(_ context.Context, decision string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, decision)
}

// Config.Observer is told the decision of every keyed request, the same
// word as the idem.http span's idem.decision; unkeyed safe requests are
// not counted.
func TestObserverCountsDecisions(t *testing.T) {
	d := testdb.SQLite(t)
	o := &decisions{}
	mw, err := idemhttp.New(d, idemhttp.Config{Observer: o})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "ok")
	}))
	send := func(method, key, body string) int {
		r := httptest.NewRequest(method, "/orders", strings.NewReader(body))
		if key != "" {
			r.Header.Set(idemhttp.HeaderKey, key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	codes := []int{
		send(http.MethodPost, "k1", `{"a":1}`), // executed
		send(http.MethodPost, "k1", `{"a":1}`), // replayed
		send(http.MethodPost, "k1", `{"a":2}`), // mismatch
		send(http.MethodPost, "", `{}`),        // rejected: key missing
		send(http.MethodGet, "", ""),           // safe: not the middleware's
	}
	if want := []int{201, 201, 422, 400, 201}; !slices.Equal(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	if want := []string{"executed", "replayed", "mismatch", "rejected"}; !slices.Equal(o.got, want) {
		t.Errorf("observed %v, want %v", o.got, want)
	}
}
