package idemkafka

import "github.com/twmb/franz-go/pkg/kgo"

// SetAfterPoll makes s call fn, with the number of records, after each
// PollRecords and before it registers the records. Set it before s
// fetches.
func SetAfterPoll(s *Subscriber, fn func(records int)) { s.afterPoll = fn }

// Client is s's franz-go client.
func Client(s *Subscriber) *kgo.Client { return s.cl }
