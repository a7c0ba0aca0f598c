package idem_test

import "context"

func contextDeadline() error { return context.DeadlineExceeded }
