package effect

import "time"

// SetFinaliseTimeout changes how long w may take to record a call's
// outcome (10s), so a test can make a call outlast it.
func SetFinaliseTimeout[TTx any](w *Worker[TTx], d time.Duration) { w.finalise = d }
