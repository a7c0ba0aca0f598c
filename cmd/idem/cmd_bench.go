package main

import (
	"context"
	"errors"
)

// runBench is not built yet; its issue replaces this file.
func runBench(ctx context.Context, env *Env, args []string) error {
	return errors.New("not built yet")
}
