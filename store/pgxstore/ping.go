package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors of Ping, checked with errors.Is.
var (
	// ErrBadURL: pgx cannot parse the connection string (which is not
	// repeated in the error: it may hold a password).
	ErrBadURL = errors.New("pgxstore: not a valid PostgreSQL connection string")
	// ErrNoAnswer: connected, but the server did not answer a ping.
	ErrNoAnswer = errors.New("pgxstore: PostgreSQL does not answer")
)

// Ping connects once to connString and pings the server, a pre-flight
// check for tools. A string that does not parse is ErrBadURL; a server
// that refuses or cannot be reached is an error whose text is the gist of
// it (the server's answer with its SQLSTATE, or the network error), with
// the original in its chain; a connection that does not answer the ping
// wraps ErrNoAnswer.
func Ping(ctx context.Context, connString string) error {
	pc, err := pgx.ParseConfig(connString)
	if err != nil {
		return ErrBadURL
	}
	c, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return gist(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if err := c.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrNoAnswer, err)
	}
	return nil
}

// connectError is a connection failure told in one line.
type connectError struct {
	msg string
	err error
}

func (e *connectError) Error() string { return e.msg }
func (e *connectError) Unwrap() error { return e.err }

// gist is the gist of a pgx connection error: the server's answer or the
// network error (pgx repeats it per address and TLS attempt).
func gist(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return &connectError{msg: fmt.Sprintf("%s: %s (SQLSTATE %s)", pe.Severity, pe.Message, pe.Code), err: err}
	}
	var ne *net.OpError
	if errors.As(err, &ne) {
		return &connectError{msg: ne.Error(), err: err}
	}
	return err
}
