// Package fpmatch compares the fingerprints the dedup tables store with the
// ones received, for every package that keeps one.
package fpmatch

import (
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/fingerprint"
)

// Payload fingerprints a message payload: [idem.Message.Fingerprint] of a
// message carrying it (canonical JSON where it is JSON, raw bytes
// otherwise).
func Payload(payload []byte) idem.Fingerprint { return idem.Message{Payload: payload}.Fingerprint() }

// Same reports whether stored (a fingerprint as kept in a table) is
// received. A stored value that is not a fingerprint is never the same.
// Every dedup table compares fingerprints through this function, and every
// fingerprint covers canonical JSON where the payload is JSON (see
// [Payload]), so a retry that reorders keys is the same request.
func Same(stored []byte, received idem.Fingerprint) bool {
	f, err := fingerprint.FromBytes(stored)
	return err == nil && f == received
}

// Check returns nil when stored is received, and otherwise a
// *[idem.FingerprintMismatchError] for key (which unwraps to
// [idem.ErrFingerprintMismatch]).
func Check(key string, stored []byte, received idem.Fingerprint) error {
	if Same(stored, received) {
		return nil
	}
	s, _ := fingerprint.FromBytes(stored)
	return &idem.FingerprintMismatchError{Key: key, Stored: s, Received: received}
}
