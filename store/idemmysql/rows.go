package idemmysql

import (
	"database/sql"
	"fmt"
	"reflect"
	"strconv"

	"github.com/idemkit/idem/store"
)

// memRows are the buffered rows of a script (store.Rows).
type memRows struct {
	rows [][]any
	i    int
	err  error
}

func (r *memRows) Next() bool {
	if r.err != nil || r.i >= len(r.rows) {
		return false
	}
	r.i++
	return true
}

func (r *memRows) Scan(dest ...any) error {
	if r.i == 0 || r.i > len(r.rows) {
		return fmt.Errorf("mysql: Scan called without a row")
	}
	return scanRow(r.rows[r.i-1], dest)
}

func (r *memRows) Err() error { return r.err }
func (r *memRows) Close()     { r.i = len(r.rows) + 1 }

// memRow is the first buffered row of a script (store.Row).
type memRow struct {
	rows [][]any
	err  error
}

func (r memRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(r.rows) == 0 {
		return fmt.Errorf("%w: %w", store.ErrNoRows, sql.ErrNoRows)
	}
	return scanRow(r.rows[0], dest)
}

func scanRow(row []any, dest []any) error {
	if len(dest) != len(row) {
		return fmt.Errorf("mysql: expected %d destination arguments in Scan, not %d", len(row), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, row[i]); err != nil {
			return fmt.Errorf("mysql: Scan column %d: %w", i, err)
		}
	}
	return nil
}

// assign stores src (a value of go-sql-driver or an argument: nil, int64,
// uint64, float64, []byte, string, bool…) into dest, the conversions
// database/sql makes for the types idem scans into.
func assign(dest, src any) error {
	switch d := dest.(type) {
	case sql.Scanner:
		if b, ok := src.([]byte); ok {
			src = append([]byte(nil), b...)
		}
		return d.Scan(src)
	case *any:
		if b, ok := src.([]byte); ok {
			src = append([]byte(nil), b...)
		}
		*d = src
		return nil
	case *[]byte:
		switch s := src.(type) {
		case nil:
			*d = nil
		case []byte:
			*d = append([]byte(nil), s...)
		case string:
			*d = []byte(s)
		default:
			*d = []byte(text(src))
		}
		return nil
	case *string:
		if src == nil {
			return fmt.Errorf("converting NULL to string is unsupported")
		}
		*d = text(src)
		return nil
	}
	v := reflect.ValueOf(dest)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("destination not a pointer")
	}
	e := v.Elem()
	if src == nil {
		if e.Kind() == reflect.Pointer {
			e.Set(reflect.Zero(e.Type()))
			return nil
		}
		return fmt.Errorf("converting NULL to %s is unsupported", e.Kind())
	}
	if e.Kind() == reflect.Pointer {
		p := reflect.New(e.Type().Elem())
		if err := assign(p.Interface(), src); err != nil {
			return err
		}
		e.Set(p)
		return nil
	}
	s := text(src)
	switch e.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, e.Type().Bits())
		if err != nil {
			return err
		}
		e.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, e.Type().Bits())
		if err != nil {
			return err
		}
		e.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, e.Type().Bits())
		if err != nil {
			return err
		}
		e.SetFloat(f)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		e.SetBool(b)
	case reflect.String:
		e.SetString(s)
	default:
		return fmt.Errorf("unsupported destination %T", dest)
	}
	return nil
}

func text(src any) string {
	switch s := src.(type) {
	case []byte:
		return string(s)
	case string:
		return s
	case bool:
		if s {
			return "1"
		}
		return "0"
	default:
		return fmt.Sprint(s)
	}
}
