package effect

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/store"
)

// completer records the completions of a Worker's calls in batches: the
// completions of calls that finish close together cost one round trip (on
// PostgreSQL one set-based UPDATE; a pipelined batch on another driver that
// pipelines) or one transaction (one commit, on SQLite one write lock),
// each row still fenced by its own token, so a lost lease is reported for
// exactly that effect.
type completer[TTx any] struct {
	l     *Ledger[TTx]
	in    chan completion
	max   int
	delay time.Duration
	// calling counts the claimed effects whose call has not yet handed a
	// completion to the completer nor ended otherwise: when it is 0 no
	// one else can join the batch, which is then recorded at once.
	calling atomic.Int64
}

type completion struct {
	key    string
	token  int64
	result []byte
	done   chan error
}

func newCompleter[TTx any](l *Ledger[TTx], size int, delay time.Duration) *completer[TTx] {
	size = max(size, 1)
	return &completer[TTx]{l: l, in: make(chan completion, size), max: size, delay: delay}
}

// complete hands the completion to the batch, calls queued once it is
// queued, and waits until it is recorded (nil), fenced off (ErrLeaseLost)
// or failed. The caller counted itself in calling; the completer counts it
// out on receipt.
func (c *completer[TTx]) complete(ctx context.Context, key string, token int64, result []byte, queued func()) error {
	if result == nil {
		result = []byte{}
	}
	done := make(chan error, 1)
	select {
	case c.in <- completion{key: key, token: token, result: result, done: done}:
		queued()
	case <-ctx.Done():
		c.calling.Add(-1)
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run records batches until in is closed and drained.
func (c *completer[TTx]) run(ctx context.Context) {
	batch := make([]completion, 0, c.max)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		first, ok := <-c.in
		if !ok {
			return
		}
		c.calling.Add(-1)
		batch = append(batch[:0], first)
		closed := false
		if len(batch) < c.max && c.calling.Load() > 0 {
			timer.Reset(c.delay)
		collect:
			for len(batch) < c.max {
				select {
				case x, ok := <-c.in:
					if !ok {
						closed = true
						break collect
					}
					c.calling.Add(-1)
					batch = append(batch, x)
					if c.calling.Load() == 0 {
						break collect
					}
				case <-timer.C:
					break collect
				}
			}
			timer.Stop()
		}
		c.flush(ctx, batch)
		if closed {
			return
		}
	}
}

// flush records batch: one completion as a single UPDATE, more with
// completeBatch (one set-based UPDATE, or one SendBatch of fenced UPDATEs). If the batch fails as a whole
// (a statement's error undoes it), each completion is recorded on its own
// so that every effect gets its own answer.
func (c *completer[TTx]) flush(ctx context.Context, batch []completion) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if len(batch) == 1 {
		b := batch[0]
		b.done <- c.l.complete(ctx, b.key, b.token, b.result)
		return
	}
	err := c.l.completeBatch(ctx, batch)
	if err != nil {
		for _, b := range batch {
			b.done <- c.l.complete(ctx, b.key, b.token, b.result)
		}
	}
}

// completeBatch records every completion of batch in one round trip and
// answers each one's done with nil or ErrLeaseLost (another claimer took
// the effect over, or it settled). Where the dialect has one (PostgreSQL),
// the batch is one set-based statement, Effects.CompleteBatch, fenced per
// row: the keys it does not return lost their lease. Otherwise it is the
// fenced Complete of each in one SendBatch, pipelined on the pool (one
// implicit transaction) when the driver pipelines, in one transaction (one
// commit) otherwise. An error of the batch as a whole is returned with
// nothing answered and nothing written.
func (l *Ledger[TTx]) completeBatch(ctx context.Context, batch []completion) error {
	now := l.now()
	at, exp := store.Micros(now), l.expiresAt(now)
	if l.q.CompleteBatch != "" {
		return l.completeSet(ctx, batch, at, exp)
	}
	affected := make([]int64, len(batch))
	stmts := make([]store.Stmt, len(batch))
	for i, b := range batch {
		stmts[i] = store.Stmt{SQL: l.q.Complete, Args: []any{b.key, b.token, b.result, at, exp}, Affected: &affected[i]}
	}
	var err error
	if l.d.SupportsPipeline() {
		err = l.d.SendBatch(ctx, l.d.Pool(), stmts)
	} else {
		err = store.InTx(ctx, l.d, func(tx TTx) error { return l.d.SendBatch(ctx, l.d.Tx(tx), stmts) })
	}
	if err != nil {
		return err
	}
	for i, b := range batch {
		b.done <- lease.Fence(affected[i], nil, fmt.Sprintf("effect: complete %q", b.key), b.token)
	}
	return nil
}

// completeSet records batch with the one statement Effects.CompleteBatch
// (the completions as arrays) and answers each completion: nil when its
// key came back, ErrLeaseLost when not.
func (l *Ledger[TTx]) completeSet(ctx context.Context, batch []completion, at, exp int64) error {
	keys, tokens, results := make([]string, len(batch)), make([]int64, len(batch)), make([][]byte, len(batch))
	for i, b := range batch {
		keys[i], tokens[i], results[i] = b.key, b.token, b.result
	}
	rows, err := l.d.Pool().Query(ctx, l.q.CompleteBatch, keys, tokens, results, at, exp)
	if err != nil {
		return fmt.Errorf("effect: complete batch: %w", err)
	}
	done := make(map[string]bool, len(batch))
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return fmt.Errorf("effect: complete batch: %w", err)
		}
		done[k] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("effect: complete batch: %w", err)
	}
	for _, b := range batch {
		var n int64
		if done[b.key] {
			n = 1
		}
		b.done <- lease.Fence(n, nil, fmt.Sprintf("effect: complete %q", b.key), b.token)
	}
	return nil
}
