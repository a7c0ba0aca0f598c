package fakeprovider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/fakeprovider"
)

func newServer(t *testing.T, cfg fakeprovider.Config) (*fakeprovider.Provider, *fakeprovider.Client) {
	t.Helper()
	p := fakeprovider.New(cfg)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() { p.Close(); srv.Close() })
	return p, fakeprovider.NewClient(srv.URL)
}

func TestSameKeySameResponseOneEffect(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	ctx := context.Background()
	first, err := c.Send(ctx, "k1", []byte(`{"to":"a@example.com"}`))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, err := c.Send(ctx, "k1", []byte(`{"to":"a@example.com"}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatalf("replay %s, want %s", again, first)
		}
	}
	if p.Calls() != 4 || p.UniqueEffects() != 1 {
		t.Fatalf("calls=%d unique=%d, want 4 and 1", p.Calls(), p.UniqueEffects())
	}
	e, ok := p.Effect("k1")
	if !ok || e.Calls != 4 || e.ID != "em_1" {
		t.Fatalf("effect %+v %v", e, ok)
	}
	log := p.CallLog()
	if log[0].Replayed || !log[1].Replayed {
		t.Fatalf("call log replay flags wrong: %+v", log)
	}
}

func TestSameKeyOtherBodyIs422Permanent(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	ctx := context.Background()
	if _, err := c.Send(ctx, "k", []byte(`a`)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Send(ctx, "k", []byte(`b`))
	var se *fakeprovider.StatusError
	if !errors.As(err, &se) || se.Status != 422 || !idem.IsPermanent(err) {
		t.Fatalf("err = %v, want permanent 422", err)
	}
	if p.UniqueEffects() != 1 {
		t.Fatalf("unique = %d", p.UniqueEffects())
	}
}

func TestKeylessCallsEachPerform(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	for range 3 {
		if _, err := c.Send(context.Background(), "", []byte(`x`)); err != nil {
			t.Fatal(err)
		}
	}
	if p.UniqueEffects() != 3 {
		t.Fatalf("unique = %d, want 3", p.UniqueEffects())
	}
	p2, c2 := newServer(t, fakeprovider.Config{RequireKey: true})
	if _, err := c2.Send(context.Background(), "", []byte(`x`)); !idem.IsPermanent(err) {
		t.Fatalf("err = %v, want permanent 400", err)
	}
	if p2.UniqueEffects() != 0 {
		t.Fatal("keyless call performed with RequireKey")
	}
}

func TestFailNextAndAlways(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	ctx := context.Background()
	p.FailNext(2, 503)
	for range 2 {
		_, err := c.Send(ctx, "k", []byte(`x`))
		if err == nil || idem.IsPermanent(err) {
			t.Fatalf("err = %v, want retryable", err)
		}
	}
	if _, err := c.Send(ctx, "k", []byte(`x`)); err != nil {
		t.Fatal(err)
	}
	p.FailAlways(400)
	for range 3 {
		if _, err := c.Send(ctx, "k2", []byte(`x`)); !idem.IsPermanent(err) {
			t.Fatalf("err = %v, want permanent", err)
		}
	}
	p.Reset()
	if _, err := c.Send(ctx, "k2", []byte(`x`)); err != nil {
		t.Fatal(err)
	}
	if p.Calls() != 7 || p.UniqueEffects() != 2 {
		t.Fatalf("calls=%d unique=%d, want 7 and 2", p.Calls(), p.UniqueEffects())
	}
}

// Drill 12 at the provider level: the provider performs the effect and then
// times out; the retry with the same key gets the stored answer.
func TestTimeoutAfterEffectThenRetrySameKey(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"hang", "drop"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			p, c := newServer(t, fakeprovider.Config{})
			c.Timeout = 300 * time.Millisecond
			if mode == "hang" {
				p.TimeoutAfterEffect(1)
			} else {
				p.DropAfterEffect(1)
			}
			ctx := context.Background()
			if _, err := c.Send(ctx, "k", []byte(`x`)); err == nil || idem.IsPermanent(err) {
				t.Fatalf("err = %v, want a retryable timeout/transport error", err)
			}
			if p.UniqueEffects() != 1 {
				t.Fatalf("effect not performed before the timeout")
			}
			c.Timeout = 10 * time.Second // the retry must not time out on a loaded machine
			res, err := c.Send(ctx, "k", []byte(`x`))
			if err != nil {
				t.Fatal(err)
			}
			e, _ := p.Effect("k")
			if string(res) != string(e.Result) || p.UniqueEffects() != 1 || p.Calls() != 2 {
				t.Fatalf("res=%s calls=%d unique=%d", res, p.Calls(), p.UniqueEffects())
			}
		})
	}
}

func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	p, c := newServer(t, fakeprovider.Config{})
	p.SetLatency(2 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if _, err := c.Send(context.Background(), fmt.Sprintf("k%d", i%4), []byte(`x`)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if p.Calls() != 40 || p.UniqueEffects() != 4 || len(p.Effects()) != 4 {
		t.Fatalf("calls=%d unique=%d", p.Calls(), p.UniqueEffects())
	}
}

func TestStartURLStats(t *testing.T) {
	t.Parallel()
	p := fakeprovider.New(fakeprovider.Config{})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Start(); err == nil {
		t.Fatal("second Start succeeded")
	}
	c := fakeprovider.NewClient(p.URL())
	if _, err := c.Send(context.Background(), "k", []byte(`x`)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(p.URL() + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf [128]byte
	n, _ := resp.Body.Read(buf[:])
	if got := string(buf[:n]); got != "{\"calls\":1,\"unique_effects\":1}\n" {
		t.Fatalf("stats = %q", got)
	}
}

func TestCloseReleasesHangingCall(t *testing.T) {
	t.Parallel()
	p := fakeprovider.New(fakeprovider.Config{})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	p.TimeoutAfterEffect(1)
	done := make(chan error, 1)
	go func() {
		_, err := fakeprovider.NewClient(p.URL()).Send(context.Background(), "k", nil)
		done <- err
	}()
	for p.UniqueEffects() == 0 {
		time.Sleep(time.Millisecond)
	}
	p.Close()
	if err := <-done; err == nil {
		t.Fatal("hanging call answered")
	}
}
