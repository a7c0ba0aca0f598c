package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/store"
)

// RetentionOf returns how long the inbox keeps the records of consumer
// (Config.RetentionFor[consumer], else Config.Retention): the replay
// horizon it covers. A redelivery after that is processed as new.
func (in *Inbox[TTx]) RetentionOf(consumer string) time.Duration { return in.retention(consumer) }

// RecordRetention stores RetentionOf(consumer) in the database (table
// consumer_horizons, migration 0015_consumer_horizons), replacing what
// consumer recorded before, so that tools in other processes — a
// dead-letter redrive (package dlq), the console, the idem command — check
// against the retention the consumer really has. The consumer runtime
// calls it when it starts; a program that runs the inbox itself calls it
// at start-up too.
func (in *Inbox[TTx]) RecordRetention(ctx context.Context, consumer string) error {
	if consumer == "" {
		return checks.Optionf("inbox: record retention: empty consumer name")
	}
	_, err := in.d.Pool().Exec(ctx, in.d.Statements().Horizons.Record, consumer,
		in.retention(consumer).Microseconds(), store.Micros(in.cfg.Now()))
	if err != nil {
		return fmt.Errorf("inbox: record the retention of consumer %q: %w", consumer, err)
	}
	return nil
}
