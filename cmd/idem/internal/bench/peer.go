package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// peerProducers is the number of concurrent producers of peer_watermill_produce
// and peer_river_schedule.
const peerProducers = 8

// peerPath is the peer harness module's directory relative to the root of
// the idem source tree.
var peerPath = filepath.Join("cmd", "idem", "internal", "bench", "peer")

// findPeerDir returns cfg.PeerDir, or the first cmd/idem/internal/bench/peer
// directory holding a go.mod found from the working directory upwards.
func findPeerDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, peerPath)
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("bench: the peer harness (cmd/idem/internal/bench/peer with its go.mod) was not found from the working directory; run idem bench --peer from the idem source tree")
		}
	}
}

// peerBinary builds the peer harness once per run (go build in its own
// module, so Watermill never enters idem's module) and returns its path.
func (e *Env) peerBinary(ctx context.Context) (string, error) {
	e.peerOnce.Do(func() {
		dir, err := findPeerDir(e.cfg.PeerDir)
		if err != nil {
			e.peerErr = err
			return
		}
		tmp, err := os.MkdirTemp("", "idem-bench-peer-")
		if err != nil {
			e.peerErr = err
			return
		}
		e.closers = append(e.closers, func() error { return os.RemoveAll(tmp) })
		bin := filepath.Join(tmp, "peer")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
		cmd.Dir = dir
		// The peer is a module of its own, outside the workspace: its
		// peers' versions must not meet idem's modules in one build list.
		cmd.Env = append(os.Environ(), "GOWORK=off")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			e.peerErr = fmt.Errorf("bench: build the peer harness in %s: %w\n%s", dir, err, out.String())
			return
		}
		e.peerBin = bin
	})
	return e.peerBin, e.peerErr
}

// runPeer runs one round of the peer harness and parses its JSON line.
func (e *Env) runPeer(ctx context.Context, args ...string) (Sample, error) {
	bin, err := e.peerBinary(ctx)
	if err != nil {
		return Sample{}, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--db", e.pgConn}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Sample{}, fmt.Errorf("peer %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var r struct {
		Ops       int   `json:"ops"`
		ElapsedNs int64 `json:"elapsed_ns"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return Sample{}, fmt.Errorf("peer output %q: %w", stdout.String(), err)
	}
	return Sample{Ops: r.Ops, Elapsed: time.Duration(r.ElapsedNs)}, nil
}

// peerProduce: 8 producers, each transaction one business row plus one
// event. idem: outbox.Enqueue on the transaction; Watermill: its SQL
// publisher on the transaction. Both through database/sql over pgx's
// stdlib driver on the same database.
func peerProduce(e *Env) Pair {
	var (
		d      *sqlstore.Driver
		ob     *outbox.Outbox[*sqlTx]
		insert string
		seq    atomic.Int64
		round  atomic.Int64
	)
	p := Pair{Name: "peer_watermill_produce"}
	p.Setup = func(ctx context.Context) (err error) {
		if d, ob, err = e.peerSetup(ctx); err != nil {
			return err
		}
		insert, err = businessTable(ctx, d, e.name("rows_idem_produce"))
		return err
	}
	p.A = Side{Label: "idem", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return throughput(ctx, budget, peerProducers, func(ctx context.Context, _ int) (int, error) {
			id := "o-" + strconv.FormatInt(seq.Add(1), 10)
			return 1, store.InTx(ctx, d, func(tx *sqlTx) error {
				if _, err := d.Tx(tx).Exec(ctx, insert, id, payload, store.Micros(time.Now())); err != nil {
					return err
				}
				_, err := ob.EnqueueTx(ctx, tx, outbox.Event{Type: "bench.order.created", Topic: "orders", Payload: payload,
					Headers: map[string]string{"order_id": id}})
				return err
			})
		})
	}}
	p.B = Side{Label: "watermill", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return e.runPeer(ctx, "--pair", "produce", "--tag", e.name("p"+strconv.FormatInt(round.Add(1), 10)),
			"--duration", budget.String(), "--workers", strconv.Itoa(peerProducers))
	}}
	return p
}

// peerSetup is what both peer pairs set up first: the peer's binary
// (built once), the database/sql PostgreSQL namespace Watermill's SQL
// adapter also runs on, and idem's outbox on it.
func (e *Env) peerSetup(ctx context.Context) (*sqlstore.Driver, *outbox.Outbox[*sqlTx], error) {
	if _, err := e.peerBinary(ctx); err != nil {
		return nil, nil, err
	}
	d, err := e.sqlPgNS(ctx)
	if err != nil {
		return nil, nil, err
	}
	ob, err := outbox.New(d, outbox.Config{})
	return d, ob, err
}

// peerConsume: N events already committed → N business rows written
// effectively-once, timed from start until the N-th row exists. idem: the
// relay publishes the outbox to JetStream and an inbox consumer in batch
// mode (100) writes the rows; Watermill: its SQL subscriber
// (SubscribeBatchSize 100) writes them through TxFromContext.
func peerConsume(e *Env) Pair {
	var (
		d      *sqlstore.Driver
		ob     *outbox.Outbox[*sqlTx]
		in     *inbox.Inbox[*sqlTx]
		events = 0
		est    = 4000.0 // Watermill's rate, calibrated after each round
	)
	size := func(budget time.Duration) int {
		if events == 0 {
			events = max(2000, int(est*budget.Seconds()))
		}
		return events
	}
	p := Pair{Name: "peer_watermill_consume", Weight: 1.5}
	p.Setup = func(ctx context.Context) (err error) {
		if d, ob, err = e.peerSetup(ctx); err != nil {
			return err
		}
		in, err = inbox.New(d, inbox.Config{})
		return err
	}
	p.A = Side{Label: "idem", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		n := size(budget)
		topic, err := e.stream(ctx, "consume")
		if err != nil {
			return Sample{}, err
		}
		table := e.name("rows_idem_consume")
		insert, err := businessTable(ctx, d, table)
		if err != nil {
			return Sample{}, err
		}
		if err := enqueueN(ctx, d, ob, topic, n); err != nil {
			return Sample{}, err
		}
		return pipelineDrain(ctx, e, d, in, topic, table, insert, n)
	}}
	p.B = Side{Label: "watermill", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		s, err := e.runPeer(ctx, "--pair", "consume", "--tag", e.name("c"), "--events", strconv.Itoa(size(budget)), "--batch", strconv.Itoa(batchSize))
		return s, err
	}}
	return p
}

// pipelineDrain starts a relay and a batch inbox consumer on topic and
// times them from start until table holds n rows.
func pipelineDrain[TTx any](ctx context.Context, e *Env, d store.Driver[TTx], in *inbox.Inbox[TTx], topic, table, insert string, n int) (Sample, error) {
	start := time.Now()
	dr, err := startDrain(ctx, e, d, in, topic, insert)
	if err != nil {
		return Sample{}, err
	}
	defer dr.stop()
	if err := waitRows(ctx, d, table, n, dr.errc); err != nil {
		return Sample{}, err
	}
	return Sample{Ops: n, Elapsed: time.Since(start)}, nil
}

// drain is a running relay → JetStream → batch inbox consumer chain.
type drain[TTx any] struct {
	relay *runningRelay[TTx]
	errc  chan error // the first failure of the relay or the consumer
	stop  func()
}

// startDrain starts a relay publishing d's outbox and a batch inbox
// consumer on topic writing one row per event with insert.
func startDrain[TTx any](ctx context.Context, e *Env, d store.Driver[TTx], in *inbox.Inbox[TTx], topic, insert string) (*drain[TTx], error) {
	pub, err := e.publisher()
	if err != nil {
		return nil, err
	}
	sub, err := e.subscriber(ctx, topic)
	if err != nil {
		return nil, err
	}
	rr, err := startRelay(ctx, d, pub)
	if err != nil {
		sub.Close()
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	dr := &drain[TTx]{relay: rr, errc: make(chan error, 2)}
	dr.stop = func() {
		cancel()
		rr.stop()
		sub.Close()
	}
	c := &batchConsumer[TTx]{d: d, in: in, sub: sub, consumer: e.name("consumer"), h: rowHandler[TTx](d, insert), bh: rowsHandler[TTx](d, insert)}
	go func() { dr.errc <- c.run(cctx) }()
	go func() {
		select {
		case err := <-rr.done:
			dr.errc <- err
		case <-cctx.Done():
		}
	}()
	return dr, nil
}
