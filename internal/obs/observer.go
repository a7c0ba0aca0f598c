package obs

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

// Observer returns o, or NopObserver when o is nil: a component calls its
// observer without checking.
func Observer(o idem.Observer) idem.Observer {
	if o == nil {
		return NopObserver{}
	}
	return o
}

// NopObserver is an idem.Observer that records nothing: the default of every
// component, and the base a partial observer (a test's) embeds.
type NopObserver struct{}

var _ idem.Observer = NopObserver{}

func (NopObserver) Start(string) func()                                 { return func() {} }
func (NopObserver) Processed(string)                                    {}
func (NopObserver) DuplicateContext(context.Context, string, string)    {}
func (NopObserver) FingerprintConflict(string, string)                  {}
func (NopObserver) Failed(string, string)                               {}
func (NopObserver) Retry(string)                                        {}
func (NopObserver) DeadLetteredContext(context.Context, string, string) {}
func (NopObserver) Unidentified(string)                                 {}
func (NopObserver) HTTPRequest(context.Context, string)                 {}
func (NopObserver) OutboxPublished(int)                                 {}
func (NopObserver) OutboxDuplicate(context.Context)                     {}
func (NopObserver) OutboxParked(context.Context, string)                {}
func (NopObserver) OutboxPublishDuration(time.Duration)                 {}
func (NopObserver) EffectHeld(string)                                   {}
func (NopObserver) GCDeleted(string, int64)                             {}
