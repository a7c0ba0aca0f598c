package broker

import (
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
)

// ValidateMessages is the check every adapter makes before it publishes
// anything: each message needs an id checks.ID accepts and a
// subject. adapter prefixes the errors ("kafka"), subject names what the
// subject is to the broker in them ("subject (topic)"). The errors wrap
// idem.ErrInvalidInput.
func ValidateMessages(adapter, subject string, msgs []idem.Message) error {
	for _, m := range msgs {
		if err := checks.ID(m.ID); err != nil {
			return fmt.Errorf("%s: message id: %w", adapter, err)
		}
		if m.Subject == "" {
			return fmt.Errorf("%s: message %q has no %s: %w", adapter, m.ID, subject, idem.ErrInvalidInput)
		}
	}
	return nil
}
