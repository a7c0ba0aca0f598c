package effect_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// N scheduled effects, 4 workers, random worker kills mid-call (half of them
// graceful cancellations, half simulated crashes that cannot write anything
// more): the provider performs every effect exactly once, raw calls ≥ N.
func TestChaosRandomWorkerKills(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		n := 5000
		if e.Name == "sqlite" {
			n = 500 // one writer: a smaller run proves the same
		}
		chaos(t, e.D, n)
	}, testdb.NoSQLPostgres)
}

func chaos(t *testing.T, d store.Driver[any], n int) {
	if testing.Short() {
		n /= 5
	}
	ctx := context.Background()
	p, c := newProvider(t)
	p.SetLatency(time.Millisecond)
	cfg := effect.Config{Lease: 300 * time.Millisecond, CallTimeout: 150 * time.Millisecond}
	l := newLedger(t, d, cfg)
	for start := 0; start < n; start += 500 {
		var effs []effect.Effect
		for i := start; i < min(start+500, n); i++ {
			effs = append(effs, effect.Effect{Key: fmt.Sprintf("email:%d", i), Kind: "email", Payload: fmt.Appendf(nil, `{"order":%d}`, i)})
		}
		schedule(t, d, l, effs...)
	}

	type slot struct {
		cancel context.CancelFunc
		down   *atomic.Bool
		done   chan struct{}
	}
	start := func() *slot {
		s := &slot{down: &atomic.Bool{}, done: make(chan struct{})}
		wl := newLedger(t, flaky{d, s.down}, cfg)
		w := fastWorker(t, wl, effect.WorkerConfig[any]{Concurrency: 16, MaxAttempts: 1000})
		if err := w.Register("email", c.Send); err != nil {
			t.Fatal(err)
		}
		var wctx context.Context
		wctx, s.cancel = context.WithCancel(ctx)
		go func() { defer close(s.done); _ = w.Run(wctx) }()
		return s
	}
	var mu sync.Mutex
	slots := make([]*slot, 4)
	for i := range slots {
		slots[i] = start()
	}
	stopKiller := make(chan struct{})
	killerDone := make(chan struct{})
	var kills, crashes int
	go func() {
		defer close(killerDone)
		for {
			select {
			case <-stopKiller:
				return
			case <-time.After(time.Duration(5+rand.IntN(40)) * time.Millisecond):
			}
			i := rand.IntN(len(slots))
			mu.Lock()
			s := slots[i]
			if rand.IntN(2) == 0 {
				s.down.Store(true) // crash: nothing more reaches the database
				crashes++
			}
			s.cancel()
			<-s.done
			kills++
			slots[i] = start()
			mu.Unlock()
		}
	}()
	// Liveness, not speed: the run fails when completions stop advancing
	// for a minute (under -race on a loaded machine 5,000 effects with a
	// worker killed every 5-45 ms can take longer than a minute in all).
	var last int64
	stalled := time.Now()
	for {
		done := counts(t, l)[effect.Completed]
		if done == int64(n) {
			break
		}
		if done > last {
			last, stalled = done, time.Now()
		} else if time.Since(stalled) > time.Minute {
			t.Fatalf("completions stalled at %d of %d for a minute", done, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stopKiller)
	<-killerDone
	for _, s := range slots {
		s.cancel()
		<-s.done
	}

	cnt := counts(t, l)
	if cnt[effect.Completed] != int64(n) || len(cnt) != 1 {
		t.Fatalf("counts = %v", cnt)
	}
	if p.UniqueEffects() != n || p.Calls() < n {
		t.Fatalf("provider unique effects = %d (want %d), raw calls = %d", p.UniqueEffects(), n, p.Calls())
	}
	pe := p.Effects()
	rows, err := d.Pool().Query(ctx, `SELECT effect_key, result FROM `+d.Table("effects"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var res []byte
		if err := rows.Scan(&key, &res); err != nil {
			t.Fatal(err)
		}
		if string(pe[key].Result) != string(res) {
			t.Fatalf("%s: stored result %s, provider %s", key, res, pe[key].Result)
		}
	}
	if kills == 0 {
		t.Fatal("no worker was killed")
	}
	t.Logf("%d effects, %d raw calls, %d unique effects, %d worker kills (%d crashes)", n, p.Calls(), p.UniqueEffects(), kills, crashes)
}
