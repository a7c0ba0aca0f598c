package idemtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// story is the account of one scenario, told when it fails: its title,
// each step with what it got, how often the user's code ran, what went
// wrong and what to change.
type story struct {
	t     testing.TB
	title string
	steps []string
	// ran tells how many times the user's code ran, for the report.
	ran func() string
	// check runs the user's invariant.
	check func(ctx context.Context) error
}

func (s *story) step(format string, args ...any) {
	s.steps = append(s.steps, fmt.Sprintf(format, args...))
}

// fail reports the scenario so far, what went wrong and what to change.
func (s *story) fail(what, change string) {
	s.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "idemtest: %s:\n", s.title)
	for i, st := range s.steps {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, st)
	}
	if s.ran != nil {
		fmt.Fprintf(&b, "  %s\n", s.ran())
	}
	fmt.Fprintf(&b, "  FAILED: %s\n", what)
	if change != "" {
		fmt.Fprintf(&b, "  what to change: %s", change)
	}
	s.t.Errorf("%s", strings.TrimRight(b.String(), "\n"))
}

// invariant runs the user's invariant after the step just told; hint says
// what a violation at this point means.
func (s *story) invariant(hint string) bool {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.check(ctx); err != nil {
		s.fail("the invariant saw: "+err.Error(), hint)
		return false
	}
	return true
}
