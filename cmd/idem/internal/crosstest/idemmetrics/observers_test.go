package idemmetrics_test

import (
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/idemmetrics"
)

// *idemmetrics.Metrics attaches to every component through idem.Observer
// (the Observer field of each component's Config), and to the proxy
// through its Observer.
var (
	_ idem.Observer      = (*idemmetrics.Metrics)(nil)
	_ idemproxy.Observer = (*idemmetrics.Metrics)(nil)
)
