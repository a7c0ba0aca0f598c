package idemmysql_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// recorder is a broker.Publisher that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	msgs []idem.Message
}

func (p *recorder) Publish(_ context.Context, msgs ...idem.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *recorder) Close() error { return nil }

func (p *recorder) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}

// The relay with DeletePublished on MySQL/MariaDB: the multi-table DELETE
// joined with JSON_TABLE removes the published rows and only them (the
// relay deletes a batch in the transaction that claims the next, so a
// delete that ignored its seqs would take unpublished rows and the count
// of published events would fall short), and every event is published.
func TestRelayDeletePublished(t *testing.T) {
	t.Parallel()
	d := idemmysqltest.Open(t)
	ctx := context.Background()
	o, err := outbox.New(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{Type: "order.created", Topic: "orders", Key: []string{"", "a", "b"}[i%3], Payload: []byte(`{}`)}
	}
	if err := store.InTx(ctx, d, func(tx *sql.Tx) error { _, err := o.EnqueueTx(ctx, tx, evs...); return err }); err != nil {
		t.Fatal(err)
	}
	pub := &recorder{}
	r, err := outbox.NewRelay(d, pub, outbox.RelayConfig{Name: "deleting", BatchSize: 16, PollInterval: 20 * time.Millisecond, DeletePublished: true})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	rows := func() int {
		var c int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Table("outbox")).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	deadline := time.Now().Add(30 * time.Second)
	for pub.count() < n || rows() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("published %d of %d, %d rows left", pub.count(), n, rows())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := pub.count(); got != n {
		t.Fatalf("published %d messages, want %d", got, n)
	}
}
