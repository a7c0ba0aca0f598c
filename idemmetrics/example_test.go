package idemmetrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idemmetrics"
)

// Register idem's metrics on your own registry and pass *Metrics to the
// components (consumer.Config.Metrics, retention.Config.Metrics, …).
func Example() {
	reg := prometheus.NewRegistry()
	m, err := idemmetrics.New(reg, idemmetrics.Options{ConstLabels: prometheus.Labels{"service": "billing"}})
	if err != nil {
		panic(err)
	}
	m.Duplicate("consumer", "billing")
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		fmt.Println(mf.GetName(), mf.GetMetric()[0].GetCounter().GetValue())
	}
	// Output:
	// idem_duplicates_suppressed_total 1
}
