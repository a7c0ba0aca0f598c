// Package testclock is a clock that tests move by hand, for the replay
// horizon tests (key lifetimes, inbox retention, letter ages) that must not
// sleep through days.
package testclock

import (
	"sync"
	"time"
)

// Clock is a manual clock, safe for concurrent use. The zero value is not
// usable; call New.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading start.
func New(start time.Time) *Clock { return &Clock{t: start} }

// Now returns the clock's time; pass it as a Config.Now.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
