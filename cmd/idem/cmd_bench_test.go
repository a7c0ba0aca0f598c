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
		{[]string{"bench", "--peer", "kafka", "--db", "postgres://x/y"}, `unknown peer "kafka"`},
		{[]string{"bench", "--peer", "watermill,nope", "--db", "postgres://x/y"}, `unknown peer "nope"`},
		{[]string{"bench", "--peer", "watermill", "--peer", "river"}, "--peer watermill,river needs --db postgres"},
		{[]string{"bench", "--scale", "--soak", "10s"}, "separate runs"},
		{[]string{"bench", "--chart", "x.svg"}, "--chart needs --scale"},
		{[]string{"bench", "--scale", "--pair", "http"}, "--scale and --soak run their own"},
		{[]string{"bench", "--soak", "10ms"}, "too short"},
		{[]string{"bench", "--duration", "10ms"}, "too short"},
		{[]string{"bench", "--db", "redis://x"}, "want postgres"},
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

// TestPeerList: --peer takes a comma list, repeats, keeps each peer once
// and in the order given.
func TestPeerList(t *testing.T) {
	t.Parallel()
	var p peerList
	for _, v := range []string{"watermill, river", "river", "watermill"} {
		if err := p.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	if got := p.String(); got != "watermill,river" {
		t.Fatalf("peers %q, want watermill,river", got)
	}
	if err := p.Set("river,kafka"); err == nil || !strings.Contains(err.Error(), `"kafka"`) {
		t.Fatalf("Set(river,kafka) = %v, want an unknown-peer error", err)
	}
}
