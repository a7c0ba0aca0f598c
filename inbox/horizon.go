package inbox

import "time"

// RetentionOf returns how long the inbox keeps the records of consumer
// (Config.RetentionFor[consumer], else Config.Retention): the replay
// horizon it covers. A redelivery after that is processed as new.
func (in *Inbox[TTx]) RetentionOf(consumer string) time.Duration { return in.retention(consumer) }
