package panics_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/panics"
)

func TestCall(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	err := panics.Call(context.Background(), log, "handler panicked", func() error { panic("boom") }, "consumer", "billing")
	var pe *idem.PanicError
	if !errors.As(err, &pe) || !errors.Is(err, idem.ErrPanic) || pe.Value != "boom" || idem.ErrorClass(err) != "panic" || idem.IsPermanent(err) {
		t.Fatalf("err %#v: want a transient *idem.PanicError of class panic with value boom", err)
	}
	if !strings.Contains(string(pe.Stack), "panics_test.go") {
		t.Errorf("stack does not reach the panicking function:\n%s", pe.Stack)
	}
	out := buf.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, `msg="handler panicked"`) ||
		!strings.Contains(out, "consumer=billing") || !strings.Contains(out, "panic=\"panic: boom\"") || !strings.Contains(out, "panics_test.go") {
		t.Errorf("log line %q", out)
	}

	// An error is returned as is and not logged; a nested recovery is not
	// logged twice.
	buf.Reset()
	plain := errors.New("plain")
	if err := panics.Call(context.Background(), log, "x", func() error { return plain }); err != plain {
		t.Errorf("err %v, want plain", err)
	}
	if err := panics.Call(context.Background(), log, "outer", func() error {
		return panics.Call(context.Background(), nil, "inner", func() error { panic(errors.New("deep")) })
	}); !errors.Is(err, idem.ErrPanic) || buf.Len() != 0 {
		t.Errorf("nested: %v, logs %q", err, buf.String())
	}
	if err := panics.Call(context.Background(), nil, "x", func() error { return nil }); err != nil {
		t.Errorf("nil: %v", err)
	}
}
