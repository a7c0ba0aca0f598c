package boxoffice

// HandlersOf returns s's consumer handlers (tests call them directly).
func HandlersOf[TTx any](s *System[TTx]) *Handlers[TTx] { return s.hs }
