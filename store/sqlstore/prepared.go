package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// A statement that database/sql runs with a query string is parsed and
// planned by SQLite on every call; on the HTTP key path (a record's read,
// before and inside the request transaction, and the completed record's
// INSERT) that parsing was about a third of the CPU of a request. The
// statements of a preparedSet are prepared once per *sql.DB (database/sql
// then prepares each on a connection the first time it runs there, and a
// transaction reuses the one of its connection: Tx.StmtContext), and run
// with the same arguments, so nothing changes but the parsing. SQLite
// re-prepares a statement by itself after a schema change.

// preparedSet holds the prepared statements of a fixed set of SQL texts,
// each prepared the first time it runs. A nil *preparedSet has none.
type preparedSet struct {
	db    *sql.DB
	names map[string]struct{} // the SQL texts to prepare
	stmts sync.Map            // SQL text → *sql.Stmt
}

func newPreparedSet(db *sql.DB, sqls ...string) *preparedSet {
	p := &preparedSet{db: db, names: make(map[string]struct{}, len(sqls))}
	for _, s := range sqls {
		if s != "" {
			p.names[s] = struct{}{}
		}
	}
	return p
}

// get returns the prepared statement of query, or nil when query is not
// one of the set or cannot be prepared now (say, before the migrations
// created its table: it then runs unprepared, and reports its own error).
//
// Preparing takes a connection of the pool, so it is done only where the
// caller holds none (mayPrepare: not inside a transaction), and then for
// every statement of the set at once. Inside a transaction a statement not
// prepared yet runs unprepared: preparing it there would wait for a second
// connection while holding the first and SQLite's write lock, and with
// the pool's other connections all waiting for that lock nothing would
// move until their busy timeouts ran out.
func (p *preparedSet) get(ctx context.Context, query string, mayPrepare bool) *sql.Stmt {
	if p == nil {
		return nil
	}
	if st, ok := p.stmts.Load(query); ok {
		return st.(*sql.Stmt)
	}
	if _, ok := p.names[query]; !ok || !mayPrepare {
		return nil
	}
	for name := range p.names {
		if _, ok := p.stmts.Load(name); ok {
			continue
		}
		st, err := p.db.PrepareContext(context.WithoutCancel(ctx), name)
		if err != nil {
			continue
		}
		if _, loaded := p.stmts.LoadOrStore(name, st); loaded {
			_ = st.Close()
		}
	}
	if st, ok := p.stmts.Load(query); ok {
		return st.(*sql.Stmt)
	}
	return nil
}

// close closes the prepared statements.
func (p *preparedSet) close() {
	if p == nil {
		return
	}
	p.stmts.Range(func(k, v any) bool {
		_ = v.(*sql.Stmt).Close()
		p.stmts.Delete(k)
		return true
	})
}

// preparedConn runs a prepared statement through the conn interface; the
// query text is its own.
type preparedConn struct{ st *sql.Stmt }

func (c preparedConn) ExecContext(ctx context.Context, _ string, args ...any) (sql.Result, error) {
	return c.st.ExecContext(ctx, args...)
}

func (c preparedConn) QueryContext(ctx context.Context, _ string, args ...any) (*sql.Rows, error) {
	return c.st.QueryContext(ctx, args...)
}

func (c preparedConn) QueryRowContext(ctx context.Context, _ string, args ...any) *sql.Row {
	return c.st.QueryRowContext(ctx, args...)
}
