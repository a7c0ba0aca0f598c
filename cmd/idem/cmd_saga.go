package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/saga"
)

// runSaga implements "idem saga list|show": the stored sagas (state, the
// step awaited, the last error) and, for show, every barrier row (action and
// compensation, origin, outcome, result) with the ledger's record of the
// effect behind it. Read-only; held sagas (a compensation failed) are listed
// with --state held.
func runSaga(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "saga", "list [--db URL] [--state STATE] [--limit 100] [--json] | show [--db URL] [--json] ID…")
	dbURL := fs.String("db", "", "database URL (postgres://…, mysql://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	state := fs.String("state", "", "only sagas in this state (running, compensating, completed, compensated, held)")
	limit := fs.Int("limit", 100, "at most this many sagas")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pos := fs.Args()
	if len(pos) == 0 {
		return fmt.Errorf("%w: missing action (list or show; run 'idem saga -h')", errUsage)
	}
	action, ids := pos[0], pos[1:]
	switch action {
	case "list":
		if len(ids) != 0 {
			return fmt.Errorf("%w: list takes no arguments (got %q)", errUsage, ids)
		}
		switch saga.State(*state) {
		case "", saga.Running, saga.Compensating, saga.Completed, saga.Compensated, saga.Held:
		default:
			return fmt.Errorf("%w: unknown --state %q (want running, compensating, completed, compensated or held)", errUsage, *state)
		}
		if *limit <= 0 {
			return fmt.Errorf("%w: --limit must be positive", errUsage)
		}
	case "show":
		if len(ids) == 0 {
			return fmt.Errorf("%w: show needs at least one saga id", errUsage)
		}
	default:
		return fmt.Errorf("%w: unknown action %q (want list or show)", errUsage, action)
	}
	if env.CheckOnly {
		return nil
	}

	d, err := openSQL(ctx, databaseURL(env, *dbURL), mustExist)
	if err != nil {
		return err
	}
	defer d.Close()
	if ok, err := sqlmeta.TableExists(ctx, d, "sagas"); err != nil {
		return err
	} else if !ok {
		return errors.New("the sagas table does not exist: run 'idem migrate up' first")
	}
	ledger, err := effect.New(d, effect.Config{})
	if err != nil {
		return err
	}
	sagas, err := saga.New(d, ledger, saga.Config{})
	if err != nil {
		return err
	}

	if action == "list" {
		list, err := sagas.List(ctx, saga.State(*state), *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			out := make([]sagaJSON, 0, len(list))
			for _, sg := range list {
				out = append(out, toSagaJSON(sg))
			}
			return printJSON(env, out)
		}
		if len(list) == 0 {
			fmt.Fprintln(env.Stdout, "no sagas")
			return nil
		}
		tw := newTable(env)
		fmt.Fprintln(tw, "ID\tNAME\tSTATE\tSTEP\tAWAITING\tUPDATED\tLAST ERROR")
		for _, sg := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", termSafe(dlqTruncate(sg.ID, 40)), termSafe(sg.Name), sg.State,
				sg.Step+1, sg.Steps, termSafe(dlqTruncate(awaiting(sg), 60)), sg.UpdatedAt.UTC().Format(time.RFC3339),
				termSafe(dlqTruncate(sg.LastError, 60)))
		}
		return tw.Flush()
	}

	var shown []sagaJSON
	for _, id := range ids {
		sg, err := sagas.Get(ctx, id)
		if err != nil {
			return err
		}
		recs, err := sagas.Steps(ctx, id)
		if err != nil {
			return err
		}
		j := toSagaJSON(sg)
		for _, r := range recs {
			st := stepJSON{Step: r.Index, Name: r.Name, Op: string(r.Op), Origin: string(r.Origin), Outcome: r.Outcome,
				Result: string(r.Result), Key: saga.Key(sg.ID, r.Name, r.Op)}
			if e, err := ledger.Get(ctx, st.Key); err == nil {
				st.Effect = &effectJSON{State: string(e.State), Attempts: e.Attempts, Token: e.Token, LastError: e.LastError}
			}
			j.StepRecords = append(j.StepRecords, st)
		}
		shown = append(shown, j)
	}
	if *asJSON {
		return printJSON(env, shown)
	}
	for i, j := range shown {
		if i > 0 {
			fmt.Fprintln(env.Stdout)
		}
		fmt.Fprintf(env.Stdout, "saga %s (%s): %s, step %d/%d\n", termSafe(j.ID), termSafe(j.Name), j.State, j.Step+1, j.Steps)
		fmt.Fprintf(env.Stdout, "  awaiting:   %s\n", termSafe(j.CurrentKey))
		if j.AbortRequested {
			fmt.Fprintln(env.Stdout, "  abort requested")
		}
		if j.LastError != "" {
			fmt.Fprintf(env.Stdout, "  last error: %s\n", termSafe(j.LastError))
		}
		fmt.Fprintf(env.Stdout, "  input:      %s\n", termSafe(dlqTruncate(j.Input, 200)))
		fmt.Fprintf(env.Stdout, "  created %s, updated %s\n", j.CreatedAt.Format(time.RFC3339), j.UpdatedAt.Format(time.RFC3339))
		tw := newTable(env)
		fmt.Fprintln(tw, "  STEP\tOP\tORIGIN\tOUTCOME\tEFFECT\tATTEMPTS\tRESULT / ERROR")
		for _, st := range j.StepRecords {
			eff, attempts, detail := "-", "-", st.Result
			if st.Effect != nil {
				eff, attempts = st.Effect.State, fmt.Sprint(st.Effect.Attempts)
				if st.Effect.LastError != "" && st.Outcome != saga.OutcomeApplied {
					detail = st.Effect.LastError
				}
			}
			fmt.Fprintf(tw, "  %d %s\t%s\t%s\t%s\t%s\t%s\t%s\n", st.Step+1, termSafe(st.Name), st.Op, st.Origin, st.Outcome,
				eff, attempts, termSafe(dlqTruncate(detail, 80)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func awaiting(sg saga.Saga) string {
	switch sg.State {
	case saga.Completed, saga.Compensated:
		return "-"
	}
	return sg.CurrentKey
}

type sagaJSON struct {
	ID             string     `json:"id"`
	Name           string     `json:"name"`
	State          string     `json:"state"`
	Step           int        `json:"step"`
	Steps          int        `json:"steps"`
	CurrentKey     string     `json:"current_key"`
	AbortRequested bool       `json:"abort_requested"`
	LastError      string     `json:"last_error,omitempty"`
	Input          string     `json:"input"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	StepRecords    []stepJSON `json:"step_records,omitempty"`
}

type stepJSON struct {
	Step    int         `json:"step"`
	Name    string      `json:"name"`
	Op      string      `json:"op"`
	Origin  string      `json:"origin"`
	Outcome string      `json:"outcome"`
	Key     string      `json:"key"`
	Result  string      `json:"result,omitempty"`
	Effect  *effectJSON `json:"effect,omitempty"`
}

type effectJSON struct {
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	Token     int64  `json:"token"`
	LastError string `json:"last_error,omitempty"`
}

func toSagaJSON(sg saga.Saga) sagaJSON {
	return sagaJSON{ID: sg.ID, Name: sg.Name, State: string(sg.State), Step: sg.Step, Steps: sg.Steps, CurrentKey: sg.CurrentKey,
		AbortRequested: sg.AbortRequested, LastError: sg.LastError, Input: string(sg.Input),
		CreatedAt: sg.CreatedAt.UTC(), UpdatedAt: sg.UpdatedAt.UTC()}
}
