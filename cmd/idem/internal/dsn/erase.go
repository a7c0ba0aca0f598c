package dsn

import (
	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/store"
)

// Erase is driverkit.Erase: a Driver[TTx] as a Driver[any].
func Erase[TTx any](d store.Driver[TTx]) store.Driver[any] { return driverkit.Erase(d) }
