package main

import (
	"context"
	"errors"
)

// runDLQ is not built yet; its issue replaces this file.
func runDLQ(ctx context.Context, env *Env, args []string) error {
	return errors.New("not built yet")
}
