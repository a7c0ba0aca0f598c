package pgxstore

import (
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BeginInsert begins a transaction and runs insertSQL in the same round trip:
// the BEGIN and the INSERT travel as one simple-protocol query, with the
// arguments rendered as literals (strings quoted under
// standard_conforming_strings, bytes as bytea hex, integers in decimal).
//
// A unique violation rolls the transaction back and reports
// inserted=false: the caller decides the duplicate with its ordinary ON
// CONFLICT path. Such a violation is logged by the server as an ERROR; the
// inbox only takes this path for first deliveries, where duplicates are
// rare races.
func (d *Driver) BeginInsert(ctx context.Context, insertSQL string, args ...any) (pgx.Tx, bool, bool, error) {
	sql, ok := inlineArgs(insertSQL, args)
	if !ok {
		return nil, false, false, nil
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, false, false, translate(err)
	}
	if c.Conn().PgConn().ParameterStatus("standard_conforming_strings") != "on" {
		c.Release()
		return nil, false, false, nil
	}
	tx, err := c.BeginTx(ctx, pgx.TxOptions{BeginQuery: "BEGIN; " + sql})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && c.Conn().PgConn().TxStatus() != 'I' {
			// The failed INSERT left the connection in an aborted
			// transaction: end it before the connection goes back.
			if _, rbErr := c.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				c.Release()
				return nil, false, false, translate(rbErr)
			}
		}
		c.Release()
		if pgErr != nil && pgErr.Code == "23505" {
			return nil, false, true, nil
		}
		return nil, false, false, translate(err)
	}
	return &pooledTx{Tx: tx, c: c}, true, true, nil
}

// ExecCommit runs stmt and COMMIT as one simple-protocol query, the
// arguments rendered as literals, for a transaction BeginInsert started.
// It reports ok=false, doing nothing, for any other transaction (or
// arguments it cannot render). The statement's row count is not reported.
// On error the transaction is rolled back; either way it is over and its
// connection is back in the pool.
func (d *Driver) ExecCommit(ctx context.Context, tx pgx.Tx, stmt string, args ...any) (bool, error) {
	pt, ok := tx.(*pooledTx)
	if !ok || pt.done.Load() {
		return false, nil
	}
	sql, ok := inlineArgs(stmt, args)
	if !ok {
		return false, nil
	}
	pt.done.Store(true)
	defer pt.release()
	_, err := pt.c.Exec(ctx, sql+"; COMMIT")
	if err != nil && pt.c.Conn().PgConn().TxStatus() != 'I' {
		_, _ = pt.c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return true, translate(err)
}

// pooledTx returns its connection to the pool when it ends, like pgxpool.Tx.
type pooledTx struct {
	pgx.Tx
	c    *pgxpool.Conn
	once sync.Once
	done atomic.Bool // ended by ExecCommit: the inner Tx must not be used
}

func (t *pooledTx) release() { t.once.Do(t.c.Release) }

func (t *pooledTx) Commit(ctx context.Context) error {
	if t.done.Load() {
		return pgx.ErrTxClosed
	}
	err := t.Tx.Commit(ctx)
	if !errors.Is(err, pgx.ErrTxClosed) {
		t.release()
	}
	return err
}

func (t *pooledTx) Rollback(ctx context.Context) error {
	if t.done.Load() {
		return pgx.ErrTxClosed
	}
	err := t.Tx.Rollback(ctx)
	if !errors.Is(err, pgx.ErrTxClosed) {
		t.release()
	}
	return err
}

// inlineArgs replaces $n placeholders with SQL literals. It supports the
// argument types the inbox passes and reports false for anything else.
func inlineArgs(sql string, args []any) (string, bool) {
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			if strings.ContainsRune(v, 0) {
				return "", false
			}
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case []byte:
			lits[i] = `'\x` + hex.EncodeToString(v) + `'::bytea`
		case int64:
			lits[i] = strconv.FormatInt(v, 10)
		case int:
			lits[i] = strconv.Itoa(v)
		default:
			return "", false
		}
	}
	var b strings.Builder
	for i := 0; i < len(sql); i++ {
		if sql[i] != '$' || i+1 >= len(sql) || sql[i+1] < '0' || sql[i+1] > '9' {
			b.WriteByte(sql[i])
			continue
		}
		j := i + 1
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(sql[i+1 : j])
		if err != nil || n < 1 || n > len(lits) {
			return "", false
		}
		b.WriteString(lits[n-1])
		i = j - 1
	}
	return b.String(), true
}
