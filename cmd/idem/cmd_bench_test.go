package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBenchUsage checks flag validation without running any benchmark.
func TestBenchUsage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--peer", "watermill"}, "needs --db postgres"},
		{[]string{"bench", "--peer", "kafka", "--db", "postgres://x/y"}, "the only peer is watermill"},
		{[]string{"bench", "--duration", "10ms"}, "too short"},
		{[]string{"bench", "--db", "mysql://x"}, "want postgres"},
		{[]string{"bench", "extra"}, "unexpected argument"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		env := &Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
		if code := run(context.Background(), env, c.args); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, errb.String())
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: stderr %q, want it to mention %q", c.args, errb.String(), c.want)
		}
	}
}
