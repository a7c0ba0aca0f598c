package dlq

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/store"
)

// maxOfMessage bounds the letters [Store.OfMessage] returns.
const maxOfMessage = 100

// OfMessage returns the letters of message id messageID, of every consumer
// and in every state, oldest first (at most 100). One message
// poisoned for several consumers of its subject has one letter per
// consumer; each is redriven or revised for its own consumer only (see
// broker.HeaderRedriveFor), so an operator resolving one sees the others
// here.
func (s *Store[TTx]) OfMessage(ctx context.Context, messageID string) ([]Letter, error) {
	rows, err := s.d.Pool().Query(ctx, s.q.OfMessage, messageID, int64(maxOfMessage))
	if err != nil {
		return nil, fmt.Errorf("dlq: letters of message %q: %w", messageID, err)
	}
	return scanLetters(rows)
}

// scanLetters reads every letter of rows and closes them.
func scanLetters(rows store.Rows) ([]Letter, error) {
	defer rows.Close()
	var out []Letter
	for rows.Next() {
		l, err := scanLetter(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
