package pgxstore

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/store"
)

// The statement lists of BeginReserved and EndReserved run once or twice
// per HTTP request, and so does a reserved transaction's first statement
// with its BEGIN (reservedTx.execFirst and queryFirst). Sent as a
// pgx.Batch they go through pgx's pipeline (pgconn.Pipeline: a
// container/list element per protocol message, a copy of every
// statement's result formats, a results object per statement): about 20
// allocations for a one-statement list and 40 for the three of a
// commit. Every statement of those lists is prepared by name on the
// connection (Driver.prepare), so the same messages — Bind and Execute
// per statement, one Sync, one write — can be sent with pgconn's batch
// and read in order from its MultiResultReader, with pgx's own argument
// encoding (pgx.ExtendedQueryBuilder) and row decoding
// (pgx.RowsFromResultReader). The protocol, the implicit transaction up to
// the Sync and the error semantics are those of the pgx.Batch: a failing
// statement makes the server skip the rest until the Sync.

// eqbPool keeps the argument encoders of sendPrepared, whose buffers
// pgx reuses (and bounds) from one Build to the next.
var eqbPool = sync.Pool{New: func() any { return new(pgx.ExtendedQueryBuilder) }}

// maxPreparedList is the longest list sendPrepared takes without
// allocating for its statement descriptions; a longer one still works.
const maxPreparedList = 8

// describe returns the description of sql prepared by name on conn, or nil
// when it is not (another exec mode, or beyond maxPrepared), in which case
// the caller sends a pgx.Batch instead. Statements already prepared cost a
// map lookup and no round trip.
func (d *driver) describe(ctx context.Context, conn *pgx.Conn, sql string) (*pgconn.StatementDescription, error) {
	if d.mode != pgx.QueryExecModeCacheStatement {
		return nil, nil
	}
	name := d.preparedName(sql)
	if name == "" {
		return nil, nil
	}
	return conn.Prepare(ctx, name, sql)
}

// sendPrepared runs stmts on conn in one round trip when every one of them
// is prepared on it (sent=false, nothing sent, otherwise: use a
// pgx.Batch). It is declined as well when the connection has a tracer, which
// sees every statement of a pgx.Batch but none of a pgconn batch. Each
// statement's result goes to its Rows or Affected; tag is the command tag
// of stmts[tagOf] (tagOf < 0: none); ran, when not nil, counts the
// statements the server completed, as queueStmts does.
func (d *driver) sendPrepared(ctx context.Context, conn *pgx.Conn, stmts []store.Stmt, tagOf int, ran *int) (sent bool, tag pgconn.CommandTag, err error) {
	if d.traced {
		return false, tag, nil
	}
	var room [maxPreparedList]*pgconn.StatementDescription
	sds := room[:0]
	for _, s := range stmts {
		sd, err := d.describe(ctx, conn, s.SQL)
		if err != nil {
			return false, tag, err
		}
		if sd == nil || !lazyArgs(s.Args) || rewrites(s.Args) {
			return false, tag, nil
		}
		sds = append(sds, sd)
	}
	var b pgconn.Batch
	eqb := eqbPool.Get().(*pgx.ExtendedQueryBuilder)
	defer eqbPool.Put(eqb)
	m := conn.TypeMap()
	for i, s := range stmts {
		if err := eqb.Build(m, sds[i], s.Args); err != nil {
			return false, tag, err
		}
		b.ExecStatement(sds[i], eqb.ParamValues, eqb.ParamFormats, ownFormats(eqb.ResultFormats))
	}
	mrr := conn.PgConn().ExecBatch(ctx, &b)
	var first error
	for i, s := range stmts {
		if !mrr.NextResult() {
			break
		}
		rr := mrr.ResultReader()
		if s.Rows != nil {
			rows := pgx.RowsFromResultReader(m, rr)
			err := s.Rows(pgxRows{rows})
			rows.Close()
			if rows.Err() == nil && ran != nil {
				*ran++
			}
			if err == nil {
				err = rows.Err()
			}
			if err != nil && first == nil {
				first = err
			}
			if i == tagOf {
				tag = rows.CommandTag()
			}
			continue
		}
		ct, err := rr.Close()
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if ran != nil {
			*ran++
		}
		if s.Affected != nil {
			*s.Affected = ct.RowsAffected()
		}
		if i == tagOf {
			tag = ct
		}
	}
	if err := mrr.Close(); first == nil {
		first = err
	}
	return true, tag, first
}

// textFormats and binaryFormats are the result formats of statements
// whose columns all have one format, shared read-only by every batch
// (pgconn only reads them).
var (
	textFormats   [maxSharedFormats]int16 // pgx.TextFormatCode is 0
	binaryFormats = func() (f [maxSharedFormats]int16) {
		for i := range f {
			f[i] = pgx.BinaryFormatCode
		}
		return f
	}()
)

// maxSharedFormats bounds the columns of a statement whose formats come
// from textFormats or binaryFormats.
const maxSharedFormats = 32

// ownFormats returns result formats equal to f that a pgconn.Batch may
// keep until it is read (Build reuses its arrays): a shared read-only
// slice when every column has the same format, else a copy.
func ownFormats(f []int16) []int16 {
	if same := sameFormats(f); same != nil || len(f) == 0 {
		return same
	}
	return append([]int16(nil), f...)
}

// sameFormats returns a shared slice equal to f when every element of f
// is the text or every one the binary format code, else nil.
func sameFormats(f []int16) []int16 {
	if len(f) == 0 || len(f) > maxSharedFormats {
		return nil
	}
	first := f[0]
	if first != pgx.TextFormatCode && first != pgx.BinaryFormatCode {
		return nil
	}
	for _, c := range f[1:] {
		if c != first {
			return nil
		}
	}
	if first == pgx.BinaryFormatCode {
		return binaryFormats[:len(f):len(f)]
	}
	return textFormats[:len(f):len(f)]
}

// rewrites reports whether args start with a pgx.QueryRewriter (such as
// pgx.NamedArgs), which only a pgx.Batch applies.
func rewrites(args []any) bool {
	if len(args) == 0 {
		return false
	}
	_, ok := args[0].(pgx.QueryRewriter)
	return ok
}
