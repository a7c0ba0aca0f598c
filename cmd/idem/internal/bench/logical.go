package bench

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// outboxRelayLogical is an experiment, not a relay: how fast committed
// outbox rows reach JetStream when they are read from PostgreSQL's logical
// replication (pgoutput) instead of being claimed and marked by the polling
// relay. Both sides drain the same N events, committed before the clock
// starts, 500 per transaction:
//
//   - A (logical): a temporary slot, created before the events are
//     committed, streams their INSERTs; each transaction's events are
//     published as one batch (one batch in flight while the next one is
//     decoded) and the slot's position is confirmed after the broker's
//     acks, so a crash republishes from the last confirmed commit, with the
//     same ids. No row is written after the INSERT: no claim, no mark.
//   - B (polling): outbox.Relay, as in outbox_relay_postgres.
//
// What the reader leaves out is what the row states provide: per-key
// blocking behind a parked event, retries with backoff, parking, the
// published state (Backlog, retention by publication time) and concurrent
// relays. The pair exists to measure what claiming and marking cost; it
// is run only where the server has wal_level = logical.
func outboxRelayLogical(e *Env) Pair {
	var (
		d   store.Driver[any]
		ob  *outbox.Outbox[any]
		pub string // the publication of d's outbox
		est = 10000.0
	)
	p := Pair{Name: "outbox_relay_logical_vs_polling_postgres"}
	p.Setup = func(ctx context.Context) error {
		pd, err := e.pgxNS(ctx)
		if err != nil {
			return err
		}
		d = driverkit.Erase(pd)
		if ob, err = outbox.New(d, outbox.Config{}); err != nil {
			return err
		}
		pub = e.name("idem_bench_" + e.runID)
		if !slotName.MatchString(pub) {
			return fmt.Errorf("publication name %q", pub) // it is quoted into START_REPLICATION's options
		}
		if _, err := pd.Pool().Exec(ctx, `CREATE PUBLICATION `+pgx.Identifier{pub}.Sanitize()+` FOR TABLE `+pd.Table("outbox")+` WITH (publish = 'insert')`); err != nil {
			return fmt.Errorf("create publication: %w", err)
		}
		e.closers = append(e.closers, func() error {
			return e.pgExec(context.Background(), `DROP PUBLICATION IF EXISTS `+pgx.Identifier{pub}.Sanitize())
		})
		return nil
	}
	size := func(budget time.Duration) int { return max(1000, int(est*budget.Seconds()*0.6)) }
	p.A = Side{Label: "logical", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		topic, bp, err := e.streamPublisher(ctx, "logical")
		if err != nil {
			return Sample{}, err
		}
		conn, err := pgconn.Connect(ctx, dsn.WithParam(e.cfg.Postgres, "replication", "database"))
		if err != nil {
			return Sample{}, fmt.Errorf("replication connection: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx)) // drops the temporary slot
		slot := e.name("idem_bench_slot_" + e.runID)
		if !slotName.MatchString(slot) {
			return Sample{}, fmt.Errorf("slot name %q", slot) // replication commands take no parameters
		}
		created, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication})
		if err != nil {
			return Sample{}, fmt.Errorf("create slot: %w", err)
		}
		from, err := pglogrepl.ParseLSN(created.ConsistentPoint)
		if err != nil {
			return Sample{}, err
		}
		n := size(budget)
		if err := enqueueN(ctx, d, ob, topic, n); err != nil {
			return Sample{}, err
		}
		start := time.Now()
		if err := pglogrepl.StartReplication(ctx, conn, slot, from, pglogrepl.StartReplicationOptions{
			Mode:       pglogrepl.LogicalReplication,
			PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"},
		}); err != nil {
			return Sample{}, fmt.Errorf("start replication: %w", err)
		}
		if err := readOutbox(ctx, conn, bp, n); err != nil {
			return Sample{}, err
		}
		s := Sample{Ops: n, Elapsed: time.Since(start)}
		est = s.PerSecond()
		return s, nil
	}}
	p.B = Side{Label: "polling", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return relayDrain(ctx, e, d, ob, "polling", size(budget))
	}}
	return p
}

// slotName is what a replication slot's name may hold.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// readOutbox reads the replication stream until n outbox events were
// published and acked, publishing each committed transaction's events as
// one batch while the next transaction is decoded, and confirming the
// slot's position after each batch's acks.
func readOutbox(ctx context.Context, conn *pgconn.PgConn, pub broker.Publisher, n int) error {
	var (
		cols      map[string]int // column name → position, from the relation message
		msgs      []idem.Message // of the transaction being decoded
		confirmed pglogrepl.LSN  // acked and confirmed to the server
		inflight  = make(chan error, 1)
		flying    pglogrepl.LSN // end of the batch being published; 0: none
		done      int
	)
	confirm := func(lsn pglogrepl.LSN) error {
		return pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: lsn})
	}
	// settle waits for the batch in flight and confirms it.
	settle := func() error {
		if flying == 0 {
			return nil
		}
		if err := <-inflight; err != nil {
			return err
		}
		confirmed, flying = flying, 0
		return confirm(confirmed)
	}
	for done < n {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		raw, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("replication: %d of %d events read: %w", done, n, err)
		}
		cd, ok := raw.(*pgproto3.CopyData)
		if !ok {
			if er, isErr := raw.(*pgproto3.ErrorResponse); isErr {
				return fmt.Errorf("replication: %s", er.Message)
			}
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return err
			}
			if ka.ReplyRequested {
				if err := confirm(confirmed); err != nil {
					return err
				}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return err
			}
			msg, err := pglogrepl.Parse(xld.WALData)
			if err != nil {
				return err
			}
			switch m := msg.(type) {
			case *pglogrepl.RelationMessage:
				cols = make(map[string]int, len(m.Columns))
				for i, c := range m.Columns {
					cols[c.Name] = i
				}
			case *pglogrepl.InsertMessage:
				ev, err := eventOfTuple(cols, m.Tuple)
				if err != nil {
					return err
				}
				msgs = append(msgs, ev.Message())
			case *pglogrepl.CommitMessage:
				if len(msgs) == 0 {
					continue
				}
				if err := settle(); err != nil {
					return err
				}
				flying, done = m.TransactionEndLSN, done+len(msgs)
				go func(msgs []idem.Message) { inflight <- pub.Publish(ctx, msgs...) }(msgs)
				msgs = nil
			}
		}
	}
	return settle()
}

// eventOfTuple builds the outbox event of a replicated row (pgoutput's text
// format) from the columns the relay's claim reads.
func eventOfTuple(cols map[string]int, t *pglogrepl.TupleData) (outbox.Event, error) {
	text := func(name string) (string, error) {
		i, ok := cols[name]
		if !ok || i >= len(t.Columns) {
			return "", fmt.Errorf("replication: no column %s", name)
		}
		return string(t.Columns[i].Data), nil
	}
	var e outbox.Event
	var err error
	for _, f := range []struct {
		name string
		dst  *string
	}{{"source", &e.Source}, {"event_id", &e.ID}, {"type", &e.Type}, {"subject", &e.Topic}, {"ce_subject", &e.Subject},
		{"datacontenttype", &e.DataContentType}, {"ordering_key", &e.Key}, {"traceparent", &e.TraceParent}, {"tracestate", &e.TraceState}} {
		if *f.dst, err = text(f.name); err != nil {
			return e, err
		}
	}
	tm, err := text("time")
	if err != nil {
		return e, err
	}
	us, err := strconv.ParseInt(tm, 10, 64)
	if err != nil {
		return e, fmt.Errorf("replication: time %q: %w", tm, err)
	}
	e.Time = store.FromMicros(us)
	if h, err := text("headers"); err != nil {
		return e, err
	} else if h != "" && h != "{}" {
		if err := json.Unmarshal([]byte(h), &e.Headers); err != nil {
			return e, fmt.Errorf("replication: headers: %w", err)
		}
	}
	p, err := text("payload")
	if err != nil {
		return e, err
	}
	if len(p) < 2 || p[:2] != `\x` {
		return e, fmt.Errorf("replication: payload is not bytea hex")
	}
	if e.Payload, err = hex.DecodeString(p[2:]); err != nil {
		return e, fmt.Errorf("replication: payload: %w", err)
	}
	return e, nil
}
