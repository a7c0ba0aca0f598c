package main

import (
	"context"
	"errors"
)

// runWorker is not built yet; its issue replaces this file.
func runWorker(ctx context.Context, env *Env, args []string) error {
	return errors.New("not built yet")
}
