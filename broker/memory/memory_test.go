package memory_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/brokertest"
	"github.com/idemkit/idem/broker/memory"
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Harness {
		b, err := memory.New(memory.Config{AckWait: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return brokertest.Harness{
			Publisher: b.Publisher(),
			Subject:   "orders",
			AckWait:   200 * time.Millisecond,
			Subscribe: func(t *testing.T, name string) broker.Subscriber {
				s, err := b.Subscribe("orders", name)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	})
}

func TestConformanceDedup(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Harness {
		b, err := memory.New(memory.Config{AckWait: 200 * time.Millisecond, DedupWindow: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return brokertest.Harness{
			Publisher: b.Publisher(),
			Subject:   "orders",
			AckWait:   200 * time.Millisecond,
			DedupByID: true,
			Subscribe: func(t *testing.T, name string) broker.Subscriber {
				s, err := b.Subscribe("orders", name)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	})
}
