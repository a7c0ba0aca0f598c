package idemwatermill

import "context"

// txKey is the context key of the transaction the middleware runs a handler
// in.
type txKey struct{}

// txValue holds a transaction in a context. Its address identifies the
// transaction: the messages of one Publish must all carry the same one.
type txValue[TTx any] struct{ tx TTx }

// ContextWithTx returns a copy of ctx carrying tx, as the middleware gives
// a handler's message: a Publisher reads it back from the context of the
// messages it publishes.
func ContextWithTx[TTx any](ctx context.Context, tx TTx) context.Context {
	return context.WithValue(ctx, txKey{}, &txValue[TTx]{tx: tx})
}

// TxFromContext returns the transaction the middleware runs the handler in,
// from the message's context (msg.Context()), as watermill-sql's
// TxFromContext does: the handler writes its business change on it, so
// the change commits with the inbox record or not at all.
//
//	tx, ok := idemwatermill.TxFromContext[*sql.Tx](msg.Context())
//
// ok is false when ctx carries no transaction of type TTx (the handler does
// not run under the middleware, or the store's transaction type differs).
func TxFromContext[TTx any](ctx context.Context) (TTx, bool) {
	v, ok := ctx.Value(txKey{}).(*txValue[TTx])
	if !ok {
		var zero TTx
		return zero, false
	}
	return v.tx, true
}
