package effect_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/errtext/errtexttest"
	"github.com/idemkit/idem/store"
)

// A provider's error text holding a NUL byte and a rune across byte 2,000
// (PostgreSQL refuses both) is recorded, cleaned and capped, whether the
// failure is transient (release) or final (fail): before, the write was
// refused and the effect stayed claimed until its lease ran out, again and
// again.
func TestProviderErrorTextIsStorable(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "charge:transient", Kind: "charge"}, effect.Effect{Key: "charge:final", Kind: "charge"})
		transient := errtexttest.Text("") + strings.Repeat("y", 100_000) // long as well
		final := idem.Permanent(errors.New(errtexttest.Text("permanent: ")))
		w := fastWorker(t, l, effect.WorkerConfig[any]{MaxAttempts: 1000})
		_ = w.Register("charge", func(_ context.Context, key string, _ []byte) ([]byte, error) {
			if key == "charge:final" {
				return nil, final
			}
			return nil, errors.New(transient)
		})
		stop := runWorker(t, w)
		waitFor(t, "final failure recorded", func() bool { return get(t, l, "charge:final").State == effect.Failed })
		waitFor(t, "transient failure recorded", func() bool {
			e := get(t, l, "charge:transient")
			return e.State == effect.Pending && e.LastError != ""
		})
		stop()
		errtexttest.Check(t, "failed effect's error", get(t, l, "charge:final").LastError, final.Error())
		errtexttest.Check(t, "released effect's error", get(t, l, "charge:transient").LastError, transient)
	})
}
