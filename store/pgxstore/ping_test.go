package pgxstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store/pgxstore"
)

func TestPing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := pgxstore.Ping(ctx, "postgres://u:hunter2@[::1"); !errors.Is(err, pgxstore.ErrBadURL) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("a bad URL: %v", err)
	}
	// Nothing listens on port 1: a network error, told in one line.
	err := pgxstore.Ping(ctx, "postgres://u@127.0.0.1:1/db?connect_timeout=2")
	if err == nil || errors.Is(err, pgxstore.ErrBadURL) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("an unreachable server: %v", err)
	}
	u := testdb.PostgresURL(t)
	if err := pgxstore.Ping(ctx, u); err != nil {
		t.Fatalf("the test server: %v", err)
	}
	// The server refuses an unknown database with its SQLSTATE.
	bad := strings.Replace(u, "/test?", "/no_such_database_xyz?", 1)
	if bad != u {
		err := pgxstore.Ping(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), "SQLSTATE 3D000") {
			t.Fatalf("an unknown database: %v", err)
		}
	}
}
