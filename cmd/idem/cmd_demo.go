package main

import (
	"context"
	"errors"
)

// runDemo is not built yet; its issue replaces this file.
func runDemo(ctx context.Context, env *Env, args []string) error {
	return errors.New("not built yet")
}
