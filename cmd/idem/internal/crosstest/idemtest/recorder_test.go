package idemtest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing, so a
// test can assert that idemtest fails, and how. Methods it does not
// override go to the real test (TempDir, Context, Name…).
type recorder struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	logs     []string
	cleanups []func()
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{TB: t}
	t.Cleanup(r.runCleanups)
	return r
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errors) > 0
}

// output is every recorded failure, in order.
func (r *recorder) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errors, "\n")
}

// mustFailWith checks that idemtest failed and that its report contains
// every one of wants.
func (r *recorder) mustFailWith(t *testing.T, wants ...string) {
	t.Helper()
	out := r.output()
	if out == "" {
		t.Fatalf("idemtest passed a handler it must catch")
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("idemtest's report lacks %q:\n%s", w, out)
		}
	}
	t.Logf("idemtest's report:\n%s", out)
}
