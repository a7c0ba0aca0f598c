package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
)

// printJSON writes v to standard output as indented JSON (the --json
// output of every command).
func printJSON(env *Env, v any) error {
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns the aligned table writer of the commands' text output
// (columns separated by tabs; Flush writes it).
func newTable(env *Env) *tabwriter.Writer {
	return tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
}

// printList writes a listing: with asJSON the rows as indented JSON (an
// empty array, not null, when there are none); otherwise the line none
// when there are none, else a table of header and one line per row
// (line formats a row, tab-separated, without its newline).
func printList[T any](env *Env, asJSON bool, rows []T, none, header string, line func(T) string) error {
	if asJSON {
		if rows == nil {
			rows = []T{}
		}
		return printJSON(env, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(env.Stdout, none)
		return nil
	}
	tw := newTable(env)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, line(r))
	}
	return tw.Flush()
}
