package boxoffice_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/boxoffice"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	s, err := boxoffice.Open(ctx, boxoffice.Options{DataDir: t.TempDir(), SQLiteSynchronous: "NORMAL",
		Config: boxoffice.Config{WebhookSecrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for i := range 20 {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"event_id":"evt-1","customer_email":"a@example.com","seats":2,"total_cents":5000,"currency":"EUR"}`))
		req.Header.Set("Idempotency-Key", fmt.Sprint("k", i%10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		t.Log(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		st, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.EmailsSent == 10 && st.Invoices == 10 {
			t.Logf("%+v", st)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, _ := s.Stats(ctx)
	t.Fatalf("%+v", st)
}
