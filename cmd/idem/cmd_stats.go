package main

import (
	"context"
	"errors"
)

// runStats is not built yet; its issue replaces this file.
func runStats(ctx context.Context, env *Env, args []string) error {
	return errors.New("not built yet")
}
