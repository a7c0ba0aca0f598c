package broker

import "github.com/idemkit/idem"

// HeaderRedriveFor names the one consumer a republished message is for: a
// dead-letter redrive or revision (package dlq) sets it to the consumer
// name of the letter. Such a message goes to the letter's subject, where
// every consumer bound to it receives it, but only the named consumer may
// process it: the others acknowledge it without running their handler and
// without writing an inbox row (they processed the original already, or
// hold their own letter for it). Messages without the header, or with it
// empty, are for every consumer. The consumer runtime (package consumer)
// acknowledges such deliveries before it reaches the inbox; package inbox
// itself (Process, ProcessTx, the batch variants and Claim) also reports
// them as duplicates, with no row written and the handler not run, so code
// that feeds it directly need not check [ForOtherConsumer] first.
const HeaderRedriveFor = "Idem-Redrive-For"

// ForOtherConsumer reports whether m was republished for a consumer other
// than consumer (its [HeaderRedriveFor] is set and names another), so
// consumer must skip it.
func ForOtherConsumer(m idem.Message, consumer string) bool {
	to := m.Headers[HeaderRedriveFor]
	return to != "" && to != consumer
}
