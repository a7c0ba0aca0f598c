package main

import (
	"context"
	"errors"
)

// runGC is not built yet; its issue replaces this file.
func runGC(ctx context.Context, env *Env, args []string) error {
	return errors.New("not built yet")
}
