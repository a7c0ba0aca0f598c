package idem_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// orderBody is a realistic request body (about 300 bytes): keys in the
// order a client's struct declares them, nested customer and line items.
const orderBody = `{"order_id":"ord_7Hc2kQ9x","customer":{"id":"cus_81723","email":"ada@example.com",` +
	`"name":"Ada Lovelace"},"items":[{"sku":"SEAT-A1","qty":2,"unit_price":"49.90"},` +
	`{"sku":"SEAT-A2","qty":1,"unit_price":"49.90"}],"currency":"EUR","total":"149.70",` +
	`"metadata":{"request_id":"b1f0c5e2-3d4a-4f7e-9c1b-2a6d8e0f1a3c","channel":"web"},"notes":"Gate \u00e9 \/ 2"}`

// BenchmarkCanonicalJSON compares the scanner with the encoding/json
// implementation it replaced, on the order body as sent (keys unsorted),
// already canonical, with an excluded field, and a 64 KiB batch of orders.
func BenchmarkCanonicalJSON(b *testing.B) {
	sorted, err := idem.CanonicalJSON([]byte(orderBody))
	if err != nil {
		b.Fatal(err)
	}
	batch := []byte("[" + strings.TrimSuffix(strings.Repeat(orderBody+",", 64<<10/len(orderBody)), ",") + "]")
	impls := []struct {
		name string
		fn   func([]byte, ...string) ([]byte, error)
	}{{"scanner", idem.CanonicalJSON}, {"legacy", legacyCanonicalJSON}}
	inputs := []struct {
		name    string
		data    []byte
		exclude []string
	}{
		{"order", []byte(orderBody), nil},
		{"order-canonical", sorted, nil},
		{"order-exclude", []byte(orderBody), []string{"metadata.request_id"}},
		{"batch-64KiB", batch, nil},
	}
	for _, in := range inputs {
		for _, impl := range impls {
			b.Run(in.name+"/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(in.data)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := impl.fn(in.data, in.exclude...); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
