package idemmetrics_test

import (
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/retention"
)

// *idemmetrics.Metrics attaches to every feature through the small
// observer interface the feature defines.
var (
	_ consumer.Observer  = (*idemmetrics.Metrics)(nil)
	_ effect.Observer    = (*idemmetrics.Metrics)(nil)
	_ idemproxy.Observer = (*idemmetrics.Metrics)(nil)
	_ retention.Observer = (*idemmetrics.Metrics)(nil)
	_ consumer.Tracer    = idemmetrics.NopTracer{}
)
