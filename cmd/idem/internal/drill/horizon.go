package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/retention"
)

// ledgerConsumer is the drill's own consumer in horizon-late-redrive: it
// appends one row per message and relies on the inbox alone (no business
// key), like most application consumers. The boxoffice's consumers also
// dedup on business keys, which would hide a late duplicate.
const ledgerConsumer = "ledger"

// horizonLateRedrive is the horizon-late-redrive scenario (issue 21): an
// order's event is processed; a second delivery with the same message id
// and another payload (a producer reusing ids) is parked by every consumer
// for a fingerprint mismatch; eight days later the original's inbox
// records have expired and the GC collected them; the operator then
// redrives the letters. Without the guard the second payload would be
// applied as a new message (two ledger rows for one message id), so every
// redrive must be refused (dlq.RefusedOriginalExpired) and the invariant
// hold. The scenario then forces the ledger's letter (as `idem dlq redrive
// --force --reason` would) to show that the guard is what kept it: forced,
// the ledger applies the second payload.
func horizonLateRedrive(ctx context.Context, r *runner, res *Result) error {
	c := &clock{}
	e, err := r.newEnv(ctx, "horizon-late-redrive", true, func(o *boxoffice.Options) { o.Now = c.now })
	if err != nil {
		return err
	}
	defer e.close()
	db := e.sys.DB()
	ledger := db.Table("drill_ledger")
	if _, err := db.Pool().Exec(ctx, `CREATE TABLE `+ledger+` (message_id text NOT NULL, payload text NOT NULL)`); err != nil {
		return err
	}
	stopLedger, err := runLedger(ctx, e, c, ledger)
	if err != nil {
		return err
	}
	defer stopLedger()

	s := r.sendOrders(ctx, e, 1, "horizon", events5, public, 0, 21)
	if err := s.err(); err != nil {
		return err
	}
	var msgID, payload string
	if _, err := e.settle(ctx, func(f facts) bool {
		if !f.converged() {
			return false
		}
		// The one order's one OrderConfirmed event, as the ledger consumer
		// received it (the relay publishes the outbox payload as is).
		err := db.Pool().QueryRow(ctx, `SELECT message_id, payload FROM `+ledger).Scan(&msgID, &payload)
		return err == nil
	}); err != nil {
		return err
	}
	// The second delivery: same id, same order, another customer e-mail.
	var oc boxoffice.OrderConfirmed
	if err := json.Unmarshal([]byte(payload), &oc); err != nil {
		return fmt.Errorf("drill: the order's event: %w", err)
	}
	oc.CustomerEmail = "someone-else@example.com"
	second, err := json.Marshal(oc)
	if err != nil {
		return err
	}
	pub, err := e.sys.Config().Broker.Publisher()
	if err != nil {
		return err
	}
	defer pub.Close()
	// broker.HeaderRedrive gives the copy its own JetStream dedup id, as a
	// publish after the duplicate window would have; consumers see the
	// original message id. Kafka and RabbitMQ have no dedup window: the
	// copy is delivered as is, the header carried along.
	if err := pub.Publish(ctx, idem.Message{ID: msgID, Subject: e.sys.Config().Subject, Payload: second,
		Headers: map[string]string{outbox.HeaderType: boxoffice.EventTypeOrderConfirmed, outbox.HeaderSource: "drill",
			outbox.HeaderSpecVersion: "1.0", broker.HeaderRedrive: "second-delivery"}}); err != nil {
		return err
	}
	const consumers = 4 // notification, billing, search, ledger
	if _, err := e.settle(ctx, func(f facts) bool { return f.parked == consumers }); err != nil {
		return err
	}
	letters, err := e.sys.DeadLetters().List(ctx, dlq.Filter{State: dlq.Parked, ErrorClass: "fingerprint_mismatch", Limit: -1})
	if err != nil {
		return err
	}
	// Eight days later the inboxes (7 days) forgot the original; the GC
	// collects their records.
	c.advance(8 * 24 * time.Hour)
	gc, err := retention.New(db, retention.Config{Now: c.now, Logger: e.sys.Config().Logger})
	if err != nil {
		return err
	}
	rep, err := gc.RunOnce(ctx)
	if err != nil {
		return err
	}
	// The operator redrives every letter.
	refused := 0
	var ledgerLetter dlq.Letter
	for _, l := range letters {
		if l.Consumer == ledgerConsumer {
			ledgerLetter = l
		}
		_, err := e.sys.DeadLetters().Redrive(ctx, l.ID, "drill", pub)
		var re *dlq.RefusedError
		switch {
		case errors.As(err, &re) && re.Reason == dlq.RefusedOriginalExpired:
			refused++
		case err == nil:
			return fmt.Errorf("drill: letter %d (%s) was redriven after its original's inbox record was collected", l.ID, l.Consumer)
		default:
			return err
		}
	}
	time.Sleep(200 * time.Millisecond) // a redrive published by mistake would be applied by now
	guarded, err := ledgerRows(ctx, e, ledger, msgID)
	if err != nil {
		return err
	}
	f, err := e.facts(ctx)
	if err != nil {
		return err
	}
	held := guarded == 1 && f.converged() && f.parked == consumers

	// Without the guard: the same redrive, forced.
	forced := int64(-1)
	if ledgerLetter.ID != 0 {
		if _, err := e.sys.DeadLetters().RedriveWith(ctx, ledgerLetter.ID, "drill", pub,
			dlq.RedriveOptions{Force: true, Reason: "drill: what the guard prevents"}); err != nil {
			return err
		}
		for deadline := time.Now().Add(r.cfg.Timeout); forced < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if forced, err = ledgerRows(ctx, e, ledger, msgID); err != nil {
				return err
			}
		}
	}
	res.Expected = fmt.Sprintf("mismatch letters=%d gc_deleted>0 refused=%d ledger_rows_for_id=1 (forced: 2)", consumers, consumers)
	res.Observed = fmt.Sprintf("mismatch letters=%d gc_deleted=%d refused=%d ledger_rows_for_id=%d (forced: %d); %s",
		len(letters), rep.Total(), refused, guarded, forced, f)
	res.Lost = f.lost()
	res.Pass = len(letters) == consumers && rep.Total() > 0 && refused == consumers && held && forced == 2
	return nil
}

// runLedger runs the ledger consumer on the system's broker, database,
// dead-letter store and clock until the returned stop is called.
func runLedger(ctx context.Context, e *env, c *clock, table string) (stop func(), err error) {
	db := e.sys.DB()
	return runConsumer(ctx, e, inbox.Config{Now: c.now}, consumer.Config[any]{Name: ledgerConsumer,
		Handler: func(ctx context.Context, tx any, msg idem.Message) error {
			_, err := db.Tx(tx).Exec(ctx, `INSERT INTO `+table+` (message_id, payload) VALUES ($1, $2)`, msg.ID, string(msg.Payload))
			return err
		}})
}

// ledgerRows counts the ledger's rows for message id.
func ledgerRows(ctx context.Context, e *env, table, id string) (int64, error) {
	var n int64
	err := e.sys.DB().Pool().QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE message_id = $1`, id).Scan(&n)
	return n, err
}
