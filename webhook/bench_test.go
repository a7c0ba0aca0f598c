package webhook_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/webhook"
)

// BenchmarkReceiver: verify + record + enqueue a new delivery, and answer a
// replay (verify + dedup), through the http.Handler without a network.
func BenchmarkReceiver(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchReceiver(b, testdb.SQLite(b)) })
	b.Run("pgx", func(b *testing.B) { benchReceiver(b, testdb.Pgx(b)) })
}

func benchReceiver[TTx any](b *testing.B, d store.Driver[TTx]) {
	e := newEnv(b, d)
	h := e.srv.Config.Handler
	body := `{"type":"invoice.paid","invoice":"in_1"}`
	serve := func(hdr http.Header) int {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header = hdr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	sign := func(id string) http.Header {
		hdr := http.Header{}
		_ = e.signer.Sign(hdr, webhook.Delivery{ID: id, Timestamp: time.Now()}, []byte(body))
		return hdr
	}
	b.Run("new", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if c := serve(sign(fmt.Sprintf("msg_%d", i))); c != http.StatusAccepted {
				b.Fatal(c)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		hdr := sign("msg_replayed")
		serve(hdr.Clone())
		for b.Loop() {
			if c := serve(hdr.Clone()); c != http.StatusOK {
				b.Fatal(c)
			}
		}
	})
}
