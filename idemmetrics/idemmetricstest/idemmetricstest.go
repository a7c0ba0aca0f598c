// Package idemmetricstest reads Prometheus metrics back in tests.
package idemmetricstest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value gathers g and returns the value of metric name whose labels,
// rendered "k=v,k=v" in label-name order, equal labels: a counter's or
// gauge's value, a histogram's sample count, and -1 when the series is
// absent (so asserting 0 also asserts that the series exists).
func Value(t testing.TB, g prometheus.Gatherer, name, labels string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, lp := range m.GetLabel() {
				parts = append(parts, lp.GetName()+"="+lp.GetValue())
			}
			if strings.Join(parts, ",") != labels {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}
