package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/idemkit/idem/store"
)

// A statement text of this dialect is one statement or a script: several
// statements separated by ";" (outside quotes and comments), run in order
// on one transaction. Each keeps PostgreSQL-style $n placeholders referring
// to the arguments documented on its sqlset field; they are rewritten to ?
// with the argument order once per text and cached. The rewrite touches
// constant SQL only, never a value.
//
// A statement may start with directives in a comment, /*idem:d1 d2 …*/:
//
//	nodup    a duplicate key (1062) affects no row instead of failing: the
//	         ON CONFLICT DO NOTHING of the other dialects, precise where
//	         INSERT IGNORE would also turn truncations and NULLs into
//	         warnings. InnoDB rolls back only the statement.
//	need     run only when the previous statement matched, inserted or
//	         returned at least one row (else the script ends here)
//	none     run only when the previous statement affected no row (a
//	         skipped statement counts as one that touched no row)
//	dup      run only when the previous statement hit a duplicate (nodup)
//	collect  a SELECT whose first column is kept, not returned; $0 in the
//	         statements after it expands to one placeholder per kept value
//	fresh    an INSERT … ON DUPLICATE KEY UPDATE c = IF(LAST_INSERT_ID(c)
//	         IS NULL, c, c) whose c is never 0: the update changes nothing
//	         but locks the existing row exclusively (no shared lock to
//	         upgrade, hence no deadlock between two claimers) and sets the
//	         statement's insert id to c, while an inserted row leaves it at
//	         0. The statement counts as touching a row (for need, none,
//	         emit and the affected count) only when it inserted one. It is
//	         a claim's SELECT … FOR UPDATE and INSERT in one round trip.
//	emit:X   (an INSERT) on success, append one output row to the result;
//	         X is a comma list of $n (that argument), id (the
//	         AUTO_INCREMENT value assigned), an integer constant and ''
//	         (the empty string): the row a SELECT after the INSERT would
//	         read, without its round trip
//	quiet    its affected rows are not counted
//	affected a SELECT of one integer, which becomes the script's affected
//	         count (not returned as a row)
//	lock     a SELECT GET_LOCK(…) that must return 1 (else
//	         store.ErrLockTimeout); the session lock is released by the
//	         driver when the transaction ends (see Driver.Begin)
//
// SELECT statements that are not collected return their rows; a script's
// rows are buffered, its affected count is the sum over its statements.

// step is one parsed statement of a script.
type step struct {
	sql     string // ? placeholders; "$0" left as a marker when list
	args    []int  // argument numbers (1-based) in placeholder order; 0 = the collected list
	list    bool   // contains $0
	query   bool   // returns rows (SELECT, WITH, SHOW)
	nodup   bool
	need    bool
	none    bool
	dup     bool
	fresh   bool
	collect bool
	lock    bool
	quiet   bool
	count   bool // affected
	emit    []emitCol
}

// emitCol is one column of an emit directive: argument arg (1-based),
// the AUTO_INCREMENT id, or the constant lit.
type emitCol struct {
	arg int
	id  bool
	lit any
}

// script is a parsed statement text.
type script struct {
	steps []step
	plain bool // one statement without directives: run as is
}

// scripts caches parsed texts, keyed by the text (constant SQL).
type scripts struct{ m sync.Map }

func (c *scripts) get(text string) (*script, error) {
	if s, ok := c.m.Load(text); ok {
		return s.(*script), nil
	}
	s, err := parse(text)
	if err != nil {
		return nil, err
	}
	c.m.Store(text, s)
	return s, nil
}

// parse splits text into statements and rewrites their placeholders.
func parse(text string) (*script, error) {
	var (
		steps []step
		cur   strings.Builder
		args  []int
		list  bool
	)
	flush := func() error {
		sqlText := strings.TrimSpace(cur.String())
		cur.Reset()
		a, l := args, list
		args, list = nil, false
		if sqlText == "" {
			return nil
		}
		st := step{args: a, list: l}
		body, err := directives(sqlText, &st)
		if err != nil {
			return err
		}
		if body == "" {
			return nil
		}
		st.sql = body
		kw := strings.ToUpper(firstWord(body))
		st.query = kw == "SELECT" || kw == "WITH" || kw == "SHOW"
		steps = append(steps, st)
		return nil
	}
	n := len(text)
	for i := 0; i < n; i++ {
		c := text[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for j < n {
				if text[j] == '\\' && c != '`' {
					j += 2
					continue
				}
				if text[j] == c {
					if j+1 < n && text[j+1] == c { // doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			if j >= n {
				return nil, fmt.Errorf("mysql: unterminated quote in statement %q", text)
			}
			cur.WriteString(text[i : j+1])
			i = j
		case c == '-' && i+1 < n && text[i+1] == '-':
			j := strings.IndexByte(text[i:], '\n')
			if j < 0 {
				i = n
			} else {
				i += j
				cur.WriteByte('\n')
			}
		case c == '/' && i+1 < n && text[i+1] == '*':
			j := strings.Index(text[i+2:], "*/")
			if j < 0 {
				return nil, fmt.Errorf("mysql: unterminated comment in statement %q", text)
			}
			cur.WriteString(text[i : i+2+j+2]) // kept: directives are read from it
			i += 2 + j + 1
		case c == '$' && i+1 < n && text[i+1] >= '0' && text[i+1] <= '9':
			j := i + 1
			for j < n && text[j] >= '0' && text[j] <= '9' {
				j++
			}
			num, _ := strconv.Atoi(text[i+1 : j])
			if num == 0 {
				list = true
				cur.WriteString("$0")
			} else {
				cur.WriteByte('?')
			}
			args = append(args, num)
			i = j - 1
		case c == ';':
			if err := flush(); err != nil {
				return nil, err
			}
		default:
			cur.WriteByte(c)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	s := &script{steps: steps}
	if len(steps) == 1 {
		st := steps[0]
		s.plain = !st.list && !st.nodup && !st.need && !st.none && !st.dup && !st.fresh && !st.collect && !st.lock && !st.quiet && !st.count && st.emit == nil
	}
	return s, nil
}

// directives reads the leading /*idem:…*/ comment of a statement into st
// and returns the statement without it.
func directives(text string, st *step) (string, error) {
	const open = "/*idem:"
	if !strings.HasPrefix(text, open) {
		return text, nil
	}
	end := strings.Index(text, "*/")
	for _, d := range strings.Fields(text[len(open):end]) {
		switch {
		case d == "nodup":
			st.nodup = true
		case d == "need":
			st.need = true
		case d == "none":
			st.none = true
		case d == "dup":
			st.dup = true
		case d == "fresh":
			st.fresh = true
		case d == "collect":
			st.collect = true
		case d == "lock":
			st.lock = true
		case d == "quiet":
			st.quiet = true
		case d == "affected":
			st.count = true
		case strings.HasPrefix(d, "emit:"):
			for _, x := range strings.Split(strings.TrimPrefix(d, "emit:"), ",") {
				switch {
				case x == "id":
					st.emit = append(st.emit, emitCol{id: true})
					continue
				case x == "''":
					st.emit = append(st.emit, emitCol{lit: ""})
					continue
				case !strings.HasPrefix(x, "$"):
					n, err := strconv.ParseInt(x, 10, 64)
					if err != nil {
						return "", fmt.Errorf("mysql: bad emit %q", d)
					}
					st.emit = append(st.emit, emitCol{lit: n})
					continue
				}
				k, err := strconv.Atoi(strings.TrimPrefix(x, "$"))
				if err != nil || k < 1 {
					return "", fmt.Errorf("mysql: bad emit %q", d)
				}
				st.emit = append(st.emit, emitCol{arg: k})
			}
		default:
			return "", fmt.Errorf("mysql: unknown directive %q", d)
		}
	}
	return strings.TrimSpace(text[end+2:]), nil
}

func firstWord(s string) string {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	for strings.HasPrefix(s, "(") {
		s = strings.TrimLeftFunc(s[1:], unicode.IsSpace)
	}
	i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) })
	if i < 0 {
		return s
	}
	return s[:i]
}

// bind returns the statement text and arguments of st for the caller's
// args and the collected values.
func (st *step) bind(args, collected []any) (string, []any, error) {
	out := make([]any, 0, len(st.args)+len(collected))
	for _, k := range st.args {
		if k == 0 {
			out = append(out, collected...)
			continue
		}
		if k > len(args) {
			return "", nil, fmt.Errorf("mysql: statement refers to $%d but has %d arguments", k, len(args))
		}
		out = append(out, args[k-1])
	}
	text := st.sql
	if st.list {
		text = strings.ReplaceAll(text, "$0", strings.TrimSuffix(strings.Repeat("?,", len(collected)), ","))
	}
	return text, out, nil
}

// conn is what a script runs on: a *sql.Tx, or a *sql.DB for plain
// statements.
type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// result is what a script produced.
type result struct {
	affected int64
	cols     int
	rows     [][]any
	locked   bool // a lock step took a session lock
}

// run runs every step of s on c in order.
func (s *script) run(ctx context.Context, c conn, args []any) (result, error) {
	var (
		res       result
		collected []any
		prevN     int64 = -1 // rows of the previous step; -1 before the first
		prevDup   bool
	)
	for i := range s.steps {
		st := &s.steps[i]
		switch {
		case st.need && prevN == 0:
			return res, nil
		case st.none && prevN > 0, st.dup && !prevDup:
			// Skipped: it touched no row, so a need step after it ends
			// the script.
			prevN, prevDup = 0, false
			continue
		}
		if st.list && len(collected) == 0 {
			return res, nil
		}
		text, a, err := st.bind(args, collected)
		if err != nil {
			return res, err
		}
		prevDup = false
		c := c
		if cc, ok := c.(cached); ok && st.list {
			// A list's text changes with its length: keep such texts out
			// of the statement cache, which holds the constant ones.
			c = cc.uncached()
		}
		switch {
		case st.lock:
			var got sql.NullInt64
			if err := c.QueryRowContext(ctx, text, a...).Scan(&got); err != nil {
				return res, err
			}
			if !got.Valid || got.Int64 != 1 {
				return res, fmt.Errorf("mysql: %w: %s did not get its lock", store.ErrLockTimeout, text)
			}
			res.locked = true
			prevN = 1
		case st.count:
			var n int64
			if err := c.QueryRowContext(ctx, text, a...).Scan(&n); err != nil {
				return res, err
			}
			res.affected, prevN = n, n
		case st.query:
			rows, err := c.QueryContext(ctx, text, a...)
			if err != nil {
				return res, err
			}
			n, err := readRows(rows, st.collect, &collected, &res)
			if err != nil {
				return res, err
			}
			prevN = n
		default:
			r, err := c.ExecContext(ctx, text, a...)
			if err != nil {
				if st.nodup && isDuplicate(err) {
					prevN, prevDup = 0, true
					continue
				}
				return res, err
			}
			n, err := r.RowsAffected()
			if err != nil {
				return res, err
			}
			if st.fresh {
				id, err := r.LastInsertId()
				if err != nil {
					return res, err
				}
				if id != 0 { // an existing row, now locked
					n = 0
				}
			}
			if !st.quiet {
				res.affected += n
			}
			prevN = n
			if st.emit != nil && n > 0 {
				row := make([]any, len(st.emit))
				for j, col := range st.emit {
					switch k := col.arg; {
					case col.id:
						id, err := r.LastInsertId()
						if err != nil {
							return res, err
						}
						row[j] = id
					case k == 0:
						row[j] = col.lit
					case k > len(args):
						return res, fmt.Errorf("mysql: emit refers to $%d but has %d arguments", k, len(args))
					default:
						row[j] = args[k-1]
					}
				}
				res.cols = len(row)
				res.rows = append(res.rows, row)
			}
		}
	}
	return res, nil
}

// readRows buffers rows into res (or, when collect, their first column
// into collected) and returns how many there were.
func readRows(rows *sql.Rows, collect bool, collected *[]any, res *result) (int64, error) {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	var n int64
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		n++
		if collect {
			*collected = append(*collected, vals[0])
			continue
		}
		res.cols = len(cols)
		res.rows = append(res.rows, vals)
	}
	return n, rows.Err()
}

// isDuplicate reports a duplicate-key error (ER_DUP_ENTRY, 1062).
func isDuplicate(err error) bool { return errors.Is(Translate(err), store.ErrUniqueViolation) }
