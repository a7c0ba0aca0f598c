// Package idemwatermill lets a Watermill service adopt idem one handler at a
// time: a Router middleware runs a handler once per message through idem's
// inbox, and a message.Publisher writes events to idem's transactional
// outbox in the handler's (or the caller's) transaction.
//
//	ib, _ := inbox.New(d, inbox.Config{})                 // d: sqlstore or pgxstore driver
//	ob, _ := outbox.New(d, outbox.Config{Source: "/billing"})
//	events, _ := idemwatermill.NewPublisher(d, ob, idemwatermill.PublisherConfig{})
//	once, _ := idemwatermill.Middleware(ib, idemwatermill.Config[*sql.Tx]{Outbox: events})
//
//	h := router.AddNoPublisherHandler("billing", "orders", sub, func(msg *message.Message) error {
//		tx, _ := idemwatermill.TxFromContext[*sql.Tx](msg.Context())
//		_, err := tx.ExecContext(msg.Context(), `INSERT INTO invoices (order_id) VALUES ($1)`, msg.Metadata.Get("order"))
//		return err // rolls back the invoice and the inbox record: the redelivery is processed
//	})
//	h.AddMiddleware(once)
//
//	relay, _ := outbox.NewRelay(d, idemwatermill.NewRelayPublisher(pub, idemwatermill.RelayPublisherConfig{}), outbox.RelayConfig{})
//	go idem.Run(ctx, relay) // publishes committed events through any Watermill publisher
//
// # The handler's transaction
//
// Middleware begins a transaction, inserts (consumer, message id) into the
// inbox in it, runs the handler with the transaction in the message's
// context and commits; the Router acknowledges after that. A duplicate (the
// pair is already committed) is acknowledged without running the handler. A
// handler error rolls the inbox record back with the handler's writes and
// is returned, so the Router nacks and the redelivery runs again. The
// consumer is the handler's name unless Config.Consumer says otherwise; the
// message id is the Watermill UUID, or a metadata value (Config.IDMetadata).
// A handler's writes must go through that transaction, and its external
// effects through idem's effect ledger: anything else is not rolled back.
//
// # Events
//
// Publisher.Publish writes to the outbox in the transaction of its messages'
// context (give them msg.Context()), or of Publisher.PublisherTx. Messages a
// handler returns are written the same way when Config.Outbox is set. The
// outbox relay (outbox.NewRelay) publishes them after the commit, at least
// once and in order per ordering key (metadata MetadataKey), to any idem
// broker adapter or, through RelayPublisher, to any Watermill publisher. Run
// it with the service's other runners (idem.Run); several relays may run.
//
// # Poison messages
//
// With Config.DeadLetters, a permanent error (idem.Permanent, a reused id
// with another payload) parks the message in idem's dead-letter store at
// once and a transient one after Config.MaxAttempts tries; the message is
// then acknowledged. A redrive (dlq.Store.Redrive through a RelayPublisher
// on the service's Watermill publisher) republishes it with its original id,
// and only the letter's consumer processes it; the topic's other handlers
// acknowledge it unrun. Without DeadLetters errors go back to the Router
// (nack), as Watermill's PoisonQueue middleware expects if it is used
// instead.
package idemwatermill
