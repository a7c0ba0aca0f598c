// Package checks holds the checks every idem package applies to its
// options and to the ids it is given, so that they fail alike.
package checks

import (
	"fmt"
	"strings"

	"github.com/idemkit/idem"
)

// Optionf returns an error wrapping [idem.ErrInvalidOption].
func Optionf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", idem.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// ID checks a message id or key: non-empty, at most [idem.MaxKeyLen]
// bytes, free of control characters and U+FFFD. The error wraps
// [idem.ErrInvalidInput].
func ID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", idem.ErrInvalidInput)
	case len(id) > idem.MaxKeyLen:
		return fmt.Errorf("%w: id of %d bytes exceeds %d", idem.ErrInvalidInput, len(id), idem.MaxKeyLen)
	case strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd }):
		return fmt.Errorf("%w: id contains control or invalid characters", idem.ErrInvalidInput)
	}
	return nil
}
