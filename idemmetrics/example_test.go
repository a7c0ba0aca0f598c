package idemmetrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idemmetrics"
)

// Register idem's metrics on your own registry and pass *Metrics to the
// components as their Observer (consumer.Config.Observer,
// outbox.RelayConfig.Observer, idemhttp.Config.Observer, …).
func Example() {
	reg := prometheus.NewRegistry()
	m, err := idemmetrics.New(reg, idemmetrics.Options{ConstLabels: prometheus.Labels{"service": "billing"}})
	if err != nil {
		panic(err)
	}
	m.Duplicate("consumer", "billing")
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if v := mf.GetMetric()[0].GetCounter().GetValue(); v > 0 {
			fmt.Println(mf.GetName(), v)
		}
	}
	// Output:
	// idem_duplicates_suppressed_total 1
}
