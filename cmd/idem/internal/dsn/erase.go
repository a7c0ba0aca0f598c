package dsn

import "github.com/idemkit/idem/store"

// Erase is store.Erase: a Driver[TTx] as a Driver[any].
func Erase[TTx any](d store.Driver[TTx]) store.Driver[any] { return store.Erase(d) }
