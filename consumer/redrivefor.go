package consumer

import (
	"context"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/checks"
)

// skipForOthers acknowledges, without processing them, the deliveries that
// a dead-letter redrive or revision addressed to another consumer
// (broker.HeaderRedriveFor), and returns the others. A skipped delivery
// writes no inbox row and does not run the handler: this consumer applied
// the original already, or holds its own letter for it, which its own
// redrive resolves.
func (c *Consumer[TTx]) skipForOthers(ctx context.Context, ds []broker.Delivery) []broker.Delivery {
	out := ds[:0:0]
	for _, dv := range ds {
		msg := dv.Message()
		if !broker.ForOtherConsumer(msg, c.cfg.Name) {
			out = append(out, dv)
			continue
		}
		c.log.DebugContext(ctx, "redrive for another consumer acknowledged without processing",
			append(attrs(c.cfg.Name, msg), "for", msg.Headers[broker.HeaderRedriveFor])...)
		sctx, cancel := settleCtx(ctx)
		if err := dv.Ack(sctx); err != nil {
			c.log.WarnContext(ctx, "ack of a redrive for another consumer failed; it is skipped again when redelivered",
				append(attrs(c.cfg.Name, msg), "error", err)...)
		}
		cancel()
	}
	return out
}

// ownRevision reports whether msg is a dead-letter revision (dlq.Store.Revise)
// addressed to consumer. Such a revision is identified by its own message
// id, even for a consumer that derives its inbox identity from the payload
// (Config.MessageID): the revision resolved the original, whose identity
// the dead-letter store recorded in this consumer's inbox, so deriving the
// same identity from the revision would make it a duplicate of the very
// message it replaces.
func ownRevision(msg idem.Message, consumer string) bool {
	return msg.Headers[dlq.HeaderRevisionOf] != "" && msg.Headers[broker.HeaderRedriveFor] == consumer
}

// prepareRevision is prepare for this consumer's own revision: its id is
// its message id, whatever Config.MessageID would derive (see
// ownRevision).
func (c *Consumer[TTx]) prepareRevision(msg idem.Message) (idem.Message, error) {
	if err := checks.ID(msg.ID); err != nil {
		return msg, noID(msg, err)
	}
	return msg, c.validate(msg)
}
