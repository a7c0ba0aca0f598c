package main

import (
	"context"
	"errors"
)

// runKeys is not built yet; its issue replaces this file.
func runKeys(ctx context.Context, env *Env, args []string) error {
	return errors.New("not built yet")
}
