package idemkafka

// SetAfterPoll makes s call fn, with the number of records, after each
// PollRecords and before it registers the records. Set it before s
// fetches.
func SetAfterPoll(s *Subscriber, fn func(records int)) { s.afterPoll = fn }
