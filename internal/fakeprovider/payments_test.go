package fakeprovider_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/fakeprovider"
)

func TestChargeOncePerKeyRacing(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	ctx := context.Background()
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Go(func() {
			r, err := c.Charge(ctx, "ch-key", fakeprovider.ChargeRequest{Amount: 900, Currency: "EUR", Reference: "o1"})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = r.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || id == "" {
			t.Fatalf("charge ids %v, want one id", ids)
		}
	}
	n, refunds, charged, refunded := p.PaymentTotals()
	if n != 1 || refunds != 0 || charged != 900 || refunded != 0 || p.PaymentCalls() != 8 {
		t.Fatalf("charges=%d refunds=%d charged=%d refunded=%d calls=%d", n, refunds, charged, refunded, p.PaymentCalls())
	}
	if _, err := c.Charge(ctx, "ch-key", fakeprovider.ChargeRequest{Amount: 901, Currency: "EUR"}); !idem.IsPermanent(err) {
		t.Fatalf("other body under the key: %v, want permanent 422", err)
	}
	if p.UniqueEffects() != 0 || p.Calls() != 0 {
		t.Fatalf("payment calls counted as e-mails: %d/%d", p.UniqueEffects(), p.Calls())
	}
}

func TestRefundOnceAndSecondRefundKeyRefused(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	ctx := context.Background()
	if _, err := c.Charge(ctx, "k", fakeprovider.ChargeRequest{Amount: 500, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r, err := c.Refund(ctx, "r1", "k")
		if err != nil || r.Status != "refunded" || r.Amount != 500 {
			t.Fatalf("refund %+v %v", r, err)
		}
	}
	if _, err := c.Refund(ctx, "r2", "k"); !idem.IsPermanent(err) {
		t.Fatalf("second refund key: %v, want permanent", err)
	}
	_, refunds, charged, refunded := p.PaymentTotals()
	if refunds != 1 || charged-refunded != 0 {
		t.Fatalf("refunds=%d charged-refunded=%d", refunds, charged-refunded)
	}
}

func TestRefundBeforeChargeCancelsTheKey(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	ctx := context.Background()
	r, err := c.Refund(ctx, "undo", "do")
	if err != nil || r.Status != "cancelled" || r.Amount != 0 {
		t.Fatalf("refund of an unknown charge: %+v %v", r, err)
	}
	_, err = c.Charge(ctx, "do", fakeprovider.ChargeRequest{Amount: 100, Currency: "EUR"})
	var se *fakeprovider.StatusError
	if !idem.IsPermanent(err) || !errors.As(err, &se) || se.Status != http.StatusUnprocessableEntity {
		t.Fatalf("late charge: %v, want permanent 422", err)
	}
	if n, refunds, _, _ := p.PaymentTotals(); n != 0 || refunds != 0 {
		t.Fatalf("charges=%d refunds=%d, want 0 0", n, refunds)
	}
}

func TestPaymentFaultsAreScopedToTheirEndpoint(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	ctx := context.Background()
	p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, Status: http.StatusPaymentRequired})
	// An e-mail is not affected by the charge fault.
	if _, err := c.Send(ctx, "e", []byte(`x`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Charge(ctx, "k", fakeprovider.ChargeRequest{Amount: 1, Currency: "EUR"}); !idem.IsPermanent(err) {
		t.Fatalf("declined charge: %v, want permanent", err)
	}
	if n, _, _, _ := p.PaymentTotals(); n != 0 {
		t.Fatalf("a declined charge was made")
	}
	// A refund that times out after refunding: the retry with its key is a replay.
	if _, err := c.Charge(ctx, "k2", fakeprovider.ChargeRequest{Amount: 7, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	p.Inject(fakeprovider.Fault{On: fakeprovider.Refunds, After: fakeprovider.Hang})
	short := &fakeprovider.Client{BaseURL: c.BaseURL, Timeout: 300 * time.Millisecond}
	if _, err := short.Refund(ctx, "r", "k2"); err == nil || idem.IsPermanent(err) {
		t.Fatalf("hanging refund: %v, want a retryable time-out", err)
	}
	r, err := c.Refund(ctx, "r", "k2")
	if err != nil || r.Status != "refunded" {
		t.Fatalf("retried refund %+v %v", r, err)
	}
	if _, refunds, charged, refunded := p.PaymentTotals(); refunds != 1 || charged != 7 || refunded != 7 {
		t.Fatalf("refunds=%d charged=%d refunded=%d", refunds, charged, refunded)
	}
}

func TestPaymentsRequireAKey(t *testing.T) {
	t.Parallel()
	_, c := newServer(t, fakeprovider.Config{})
	if _, err := c.Charge(context.Background(), "", fakeprovider.ChargeRequest{Amount: 1, Currency: "EUR"}); !idem.IsPermanent(err) {
		t.Fatalf("keyless charge: %v, want permanent 400", err)
	}
}
