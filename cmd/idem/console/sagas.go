package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/saga"
)

// errSagaNotHeld refuses a held-saga action on a saga that is no longer
// held (or is held on another compensation than the form showed).
var errSagaNotHeld = errors.New("the saga is not held (on this compensation): reload the page")

// errNoSagas refuses a held-saga action on a database without the sagas
// table (migration 0008_sagas).
var errNoSagas = fmt.Errorf("%w: this database has no sagas table (migration 0008_sagas)", idem.ErrNotFound)

// heldSaga is a saga held because a compensation failed for good.
type heldSaga struct {
	saga.Saga
	StepName string // the step whose compensation failed
}

// sagasOn reports whether the database has the sagas table; without it
// (0008_sagas not applied) the console shows no saga sections.
func (c *Console[TTx]) sagasOn(ctx context.Context) (bool, error) {
	return tableExists(ctx, c.d, "sagas")
}

// heldSagas returns the sagas in state held, and whether the database has
// sagas at all.
func (c *Console[TTx]) heldSagas(ctx context.Context) ([]heldSaga, bool, error) {
	ok, err := c.sagasOn(ctx)
	if err != nil || !ok {
		return nil, false, err
	}
	sgs, err := c.sagas.List(ctx, saga.Held, heldLimit)
	if err != nil {
		return nil, true, err
	}
	out := make([]heldSaga, 0, len(sgs))
	for _, sg := range sgs {
		out = append(out, heldSaga{sg, undoStep(sg)})
	}
	return out, true, nil
}

// undoStep is the step name in a held saga's current key
// ("saga/<id>/<step>/undo"), or "" if the key has another shape.
func undoStep(sg saga.Saga) string {
	s, ok := strings.CutPrefix(sg.CurrentKey, "saga/"+sg.ID+"/")
	if !ok {
		return ""
	}
	s, ok = strings.CutSuffix(s, "/"+string(saga.Undo))
	if !ok {
		return ""
	}
	return s
}

// heldSagaAct releases (the ledger's Retry of the failed compensation: the
// saga resumes compensating) or resolves as completed (the ledger's Resolve:
// the compensation was done by hand) the compensation a held saga waits
// for. The form names the saga (id) and the effect it showed (key); the
// action is refused unless the saga is still held on that effect.
func (c *Console[TTx]) heldSagaAct(r *http.Request, verb, why string) error {
	ctx := r.Context()
	id, key := r.PostForm.Get("id"), r.PostForm.Get("key")
	if id == "" {
		return badForm("the saga id is missing")
	}
	if ok, err := c.sagasOn(ctx); err != nil {
		return err
	} else if !ok {
		return errNoSagas
	}
	act := func(do func(key string) error) func() (string, error) {
		return func() (string, error) {
			sg, err := c.sagas.Get(ctx, id)
			if err != nil {
				return "", err
			}
			if sg.State != saga.Held || (key != "" && key != sg.CurrentKey) {
				return "", fmt.Errorf("saga %q is %s on %s: %w", id, sg.State, sg.CurrentKey, errSagaNotHeld)
			}
			return "effect " + sg.CurrentKey, do(sg.CurrentKey)
		}
	}
	target := "saga " + id
	if verb == "resolve" {
		result := formText(r, "result")
		return c.audited(r, "held.saga.resolve", target, why, fmt.Sprintf("result %d bytes: %s", len(result), truncate(string(result), 200)),
			act(func(k string) error { return c.ledger.Resolve(ctx, k, result) }))
	}
	return c.audited(r, "held.saga.release", target, why, "",
		act(func(k string) error { return c.ledger.Retry(ctx, k) }))
}
