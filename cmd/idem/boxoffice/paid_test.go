package boxoffice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
)

// TestPaidOrders runs the paid-order saga through the API on SQLite and
// PostgreSQL: a paid order is reserved, charged once and confirmed, racing
// duplicate requests are one order and one charge, a declined charge
// releases the seats and charges nothing, a key reused with another body is
// 422, and a finished order cannot be cancelled.
func TestPaidOrders(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testPaidOrders(t, e.D) })
}

type paidAnswer struct {
	status int
	order  boxoffice.PaidOrder
	body   string
}

func postPaid(t *testing.T, url, key, body string) paidAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/paid-orders", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return paidAnswer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := paidAnswer{status: resp.StatusCode, body: string(b)}
	_ = json.Unmarshal(b, &a.order)
	return a
}

func paidBody(cents int) string {
	return fmt.Sprintf(`{"event_id":"gala","customer_email":"ana@example.com","seats":2,"total_cents":%d,"currency":"EUR"}`, cents)
}

func testPaidOrders(t *testing.T, d store.Driver[any]) {
	ctx := context.Background()
	p := fakeprovider.New(fakeprovider.Config{})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sys, err := boxoffice.New(ctx, d, boxoffice.Config{ProviderURL: p.URL(), WebhookSecrets: []string{testSecret},
		Roles: []boxoffice.Role{boxoffice.RoleAPI, boxoffice.RoleEffects}, Seats: 10,
		PollInterval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	srv := httptest.NewServer(sys.Handler())
	defer srv.Close()

	if a := postPaid(t, srv.URL, "", paidBody(100)); a.status != http.StatusBadRequest {
		t.Fatalf("no key: %d %s", a.status, a.body)
	}
	// Racing duplicates: one order, one saga.
	answers := make([]paidAnswer, 6)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = postPaid(t, srv.URL, "k-1", paidBody(4000)) })
	}
	wg.Wait()
	created := 0
	for _, a := range answers {
		if a.status == http.StatusCreated {
			created++
		} else if a.status != http.StatusOK {
			t.Fatalf("duplicate answered %d %s", a.status, a.body)
		}
		if a.order.OrderID != answers[0].order.OrderID {
			t.Fatalf("duplicates answered two orders: %s %s", a.order.OrderID, answers[0].order.OrderID)
		}
	}
	if created != 1 {
		t.Fatalf("%d requests created the order", created)
	}
	if a := postPaid(t, srv.URL, "k-1", paidBody(4001)); a.status != http.StatusUnprocessableEntity {
		t.Fatalf("key reused with another body: %d %s", a.status, a.body)
	}
	p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, Status: http.StatusPaymentRequired})
	declined := postPaid(t, srv.URL, "k-2", paidBody(2500)) // the first charge the provider sees may be either order's
	ok := answers[0].order
	for _, id := range []string{ok.OrderID, declined.order.OrderID} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get(srv.URL + "/paid-orders/" + id)
			if err != nil {
				t.Fatal(err)
			}
			var o boxoffice.PaidOrder
			_ = json.NewDecoder(resp.Body).Decode(&o)
			resp.Body.Close()
			if o.SagaState == string(saga.Completed) || o.SagaState == string(saga.Compensated) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("order %s: %+v", id, o)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	f, err := sys.PaidFacts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	charges, refunds, charged, refunded := p.PaymentTotals()
	if f.Orders != 2 || f.Confirmed != 1 || f.Failed != 1 || charges != 1 || refunds != 0 || charged-refunded != f.ConfirmedCents {
		t.Fatalf("facts %+v, provider charges=%d refunds=%d charged=%d refunded=%d", f, charges, refunds, charged, refunded)
	}
	for id, st := range f.Status {
		if released, held := f.Holds[id]; !held || released != (st == boxoffice.PaidFailed) {
			t.Fatalf("order %s (%s): hold %v released %v", id, st, held, released)
		}
	}
	resp, err := http.Post(srv.URL+"/paid-orders/"+ok.OrderID+"/cancel", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("cancel of a finished order: %d", resp.StatusCode)
	}
}

// TestPaidOrdersHostileInput: a bad key, tenant, body or order id answers
// 4xx problem+json and records nothing.
func TestPaidOrdersHostileInput(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	sys, srv := apiServer(t, d)
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
		body         []byte
		want         int
	}{
		{"POST", "/paid-orders", map[string]string{"Idempotency-Key": "k\xff"}, []byte(paidBody(1)), http.StatusBadRequest},
		{"POST", "/paid-orders", map[string]string{"Idempotency-Key": string(bytes.Repeat([]byte("k"), 129))}, []byte(paidBody(1)), http.StatusBadRequest},
		{"POST", "/paid-orders", map[string]string{"Idempotency-Key": "k", "X-Tenant-ID": "bad tenant"}, []byte(paidBody(1)), http.StatusBadRequest},
		{"POST", "/paid-orders", map[string]string{"Idempotency-Key": "k"}, []byte(`{"event_id":"e"}`), http.StatusBadRequest},
		{"POST", "/paid-orders", map[string]string{"Idempotency-Key": "k"}, bytes.Repeat([]byte(" "), boxoffice.MaxOrderBody+1), http.StatusRequestEntityTooLarge},
		{"GET", "/paid-orders/%00", nil, nil, http.StatusNotFound},
		{"GET", "/paid-orders/ord_00000000-0000-0000-0000-000000000000", nil, nil, http.StatusNotFound},
		{"POST", "/paid-orders/nope/cancel", nil, nil, http.StatusNotFound},
	} {
		a := call(t, c.method, srv.URL+c.path, c.hdr, c.body)
		if a.status != c.want || a.ctype != "application/problem+json" {
			t.Errorf("%s %s: %d %q, want %d problem+json", c.method, c.path, a.status, a.ctype, c.want)
		}
	}
	if f, err := sys.PaidFacts(context.Background()); err != nil || f.Orders != 0 {
		t.Fatalf("facts %+v %v after hostile input", f, err)
	}
}
