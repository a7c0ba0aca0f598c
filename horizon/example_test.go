package horizon_test

import (
	"fmt"
	"time"

	"github.com/idemkit/idem/horizon"
)

// A deployment declares its horizons once; Weakest names the replay that
// outlives the record meant to recognise it. Here the billing consumer's
// inbox forgets a message after 7 days while the stream may redeliver it
// for 14.
func Example() {
	const day = 24 * time.Hour
	sys := horizon.System{
		Name:           "shop",
		ClientRetry:    day,
		HTTPOperations: []horizon.HTTPOperation{{Name: "POST /orders", KeyRetention: day}},
		Streams:        []horizon.Stream{{Name: "ORDERS", MaxAge: 14 * day, DuplicateWindow: 2 * time.Minute}},
		Consumers:      []horizon.Consumer{{Name: "billing", Stream: "ORDERS", InboxRetention: 7 * day}},
		RedriveWindow:  7 * day,
	}
	c, ok := sys.Weakest()
	if !ok {
		return
	}
	fmt.Println("ok:", c.OK, "severity:", c.Severity)
	fmt.Printf("%s of %s: %s\n", c.Replay.Stage, c.Replay.Component, c.Replay)
	fmt.Printf("%s of %s: %s\n", c.Guard.Stage, c.Guard.Component, c.Guard)
	fmt.Println("short by", horizon.Format(-c.Margin))
	// Output:
	// ok: false severity: breaks
	// broker_max_age of ORDERS: 14d
	// inbox_retention of billing: 7d
	// short by 7d
}
