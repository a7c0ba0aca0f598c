package drill

import (
	"context"
	"errors"
)

func processes(ctx context.Context, r *runner, res *Result) error {
	return errors.New("not yet")
}
