package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Statements returns idem's PostgreSQL statements for the driver's schema.
func (d *driver) Statements() *sqlset.Set { return d.stmts }

// SupportsPipeline is true unless the pool runs pgx's simple protocol,
// where pgx interpolates values itself and idem declines to pipeline.
func (d *driver) SupportsPipeline() bool { return d.mode != pgx.QueryExecModeSimpleProtocol }

// SupportsListener is true: PostgreSQL has LISTEN/NOTIFY.
func (d *driver) SupportsListener() bool { return true }

// SupportsAdvisoryLocks is true: PostgreSQL has advisory locks.
func (d *driver) SupportsAdvisoryLocks() bool { return true }

// batcher is what pgx.Tx, *pgx.Conn and *pgxpool.Pool offer for batches.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// SendBatch queues stmts in one pgx.Batch (one round trip) on q's
// connection, transaction or pool; errors are translated like every other
// statement's. On a pool the batch runs on one connection in one implicit
// transaction (one Sync): transaction-scoped locks and settings last until
// its end, it commits when every statement succeeded and rolls back at the
// first error. On a querier that is not the driver's own, or on the simple
// protocol, the statements run one by one (driverkit.RunStmts).
func (d *driver) SendBatch(ctx context.Context, q store.Querier, stmts []store.Stmt) error {
	qq, ok := q.(querier)
	if !ok || !d.SupportsPipeline() {
		return driverkit.RunStmts(ctx, q, stmts)
	}
	bt, ok := qq.c.(batcher)
	if !ok {
		return driverkit.RunStmts(ctx, q, stmts)
	}
	b := &pgx.Batch{}
	queueStmts(b, stmts, nil)
	if err := bt.SendBatch(ctx, b).Close(); err != nil {
		return translate(err)
	}
	return nil
}

var channelRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Listen acquires a connection from the pool and LISTENs on channel. The
// listener is a store.QueryListener (its connection also runs statements,
// as the outbox relay does) unless the pool's ConnConfig sets an
// OnNotification hook or a context handler other than pgconn's default
// deadline without delay.
func (d *driver) Listen(ctx context.Context, channel string) (store.Listener, error) {
	if !channelRe.MatchString(channel) {
		return nil, fmt.Errorf("pgxstore: channel %q is not a plain identifier", channel)
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, translate(err)
	}
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		c.Release()
		return nil, translate(err)
	}
	l := &listener{c: c, channel: channel}
	if !d.queryable(c) {
		return waitListener{l}, nil
	}
	return l, nil
}

// queryable reports whether a listening connection of the pool can also
// run statements (store.QueryListener): pgx keeps the notifications that
// arrive during statements only when the pool's ConnConfig has no
// OnNotification hook of its own, and a wait ends at once with its context
// only with pgconn's default handling of a done context (a deadline, no
// delay); a CancelRequestContextWatcherHandler would send the server a
// cancel request, and a delay would stretch every timed wait.
func (d *driver) queryable(c *pgxpool.Conn) bool {
	cfg := d.pool.Config().ConnConfig
	if cfg.OnNotification != nil {
		return false
	}
	if cfg.BuildContextWatcherHandler == nil {
		return true
	}
	h, ok := cfg.BuildContextWatcherHandler(c.Conn().PgConn()).(*pgconn.DeadlineContextWatcherHandler)
	return ok && h.DeadlineDelay == 0
}

// waitListener is a listener whose connection does nothing but wait
// (the pool's settings do not allow more: see queryable).
type waitListener struct{ l *listener }

func (w waitListener) Wait(ctx context.Context) (string, error) { return w.l.Wait(ctx) }
func (w waitListener) Close(ctx context.Context) error          { return w.l.Close(ctx) }

// listener is a store.QueryListener: the connection also runs
// statements between waits, and pgx keeps the notifications that arrive
// meanwhile for the next wait.
type listener struct {
	c       *pgxpool.Conn
	channel string
}

var _ store.QueryListener = (*listener)(nil)

func (l *listener) Wait(ctx context.Context) (string, error) {
	n, err := l.c.Conn().WaitForNotification(ctx)
	switch {
	case err != nil:
		return "", err
	case n == nil:
		// The pool's ConnConfig has an OnNotification hook of its own,
		// which took the notification: pgx keeps none to return.
		return "", nil
	}
	return n.Payload, nil
}

// Querier runs statements on the listening connection.
func (l *listener) Querier() store.Querier { return querier{l.c} }

// Broken reports that the connection is closed, busy or inside a
// transaction.
func (l *listener) Broken() bool {
	if l.c == nil {
		return true
	}
	pc := l.c.Conn().PgConn()
	return pc.IsClosed() || pc.IsBusy() || pc.TxStatus() != 'I'
}

// Drain takes the notifications pgx kept while statements ran: a wait on
// a context that is already done returns a kept notification at once and
// otherwise fails before touching the connection.
func (l *listener) Drain() bool {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	got := false
	for {
		if _, err := l.c.Conn().WaitForNotification(done); err != nil {
			return got
		}
		got = true
	}
}

func (l *listener) Close(ctx context.Context) error {
	if l.c == nil {
		return nil // closed already
	}
	defer func() { l.c = nil }()
	// A connection that was listening is closed rather than returned to
	// the pool, so no later user inherits the LISTEN.
	err := l.c.Conn().Close(ctx)
	l.c.Release()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
