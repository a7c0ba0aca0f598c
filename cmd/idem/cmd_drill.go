package main

import (
	"context"
	"errors"
)

// runDrill is not built yet; its issue replaces this file.
func runDrill(ctx context.Context, env *Env, args []string) error {
	return errors.New("not built yet")
}
