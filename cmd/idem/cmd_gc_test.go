package main

import (
	"context"
	"github.com/idemkit/idem/internal/testlog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGCLoopSaysItLoops: "idem gc" without --once says on start that it
// runs a pass every --interval until interrupted and how to stop it, runs
// a pass, and exits 0 when interrupted (item 24).
func TestGCLoopSaysItLoops(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + path}
	if code, _, stderr := runCmd(t, vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	var out, errb testlog.Buffer
	env := &Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, env, []string{"gc", "--interval", "90m"}) }()
	waitFor(t, "the first pass", func() bool { return strings.Contains(out.String(), "deleted 0 row(s)") })
	notice := errb.String()
	for _, want := range []string{"every 1h30m0s", "until interrupted", "Ctrl-C", "--once", "sqlite://" + path} {
		if !strings.Contains(notice, want) {
			t.Errorf("start notice %q lacks %q", notice, want)
		}
	}
	assertOneLine(t, "gc start notice", notice)
	select {
	case code := <-done:
		t.Fatalf("gc exited (%d) before it was interrupted", code)
	default:
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("interrupted gc: exit %d: %s", code, errb.String())
	}
	// --once says nothing about a loop.
	code, _, stderr := runCmd(t, vars, "gc", "--once")
	if code != 0 || strings.Contains(stderr, "until interrupted") {
		t.Fatalf("gc --once: exit %d, stderr %q", code, stderr)
	}
}
