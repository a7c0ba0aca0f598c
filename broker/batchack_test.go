package broker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/broker"
)

func TestBatchAckError(t *testing.T) {
	if err := broker.NewBatchAckError([]error{nil, nil}); err != nil {
		t.Fatalf("every ack done: %v, want nil", err)
	}
	revoked := errors.New("partition revoked")
	err := broker.NewBatchAckError([]error{nil, revoked, nil})
	var be *broker.BatchAckError
	if !errors.As(err, &be) || !errors.Is(err, revoked) {
		t.Fatalf("%v: want a *BatchAckError wrapping the failed ack's error", err)
	}
	if !strings.Contains(err.Error(), "1 of 3 acks failed") || !strings.Contains(err.Error(), "partition revoked") {
		t.Errorf("message %q", err)
	}
	for i, want := range []bool{true, false, true} {
		if got := broker.BatchAcked(err, i); got != want {
			t.Errorf("BatchAcked(err, %d) = %v, want %v", i, got, want)
		}
	}
	if broker.BatchAcked(err, 3) || broker.BatchAcked(err, -1) {
		t.Error("an index outside the batch is reported acked")
	}
	if !broker.BatchAcked(nil, 7) {
		t.Error("a nil error leaves a delivery unacked")
	}
	if broker.BatchAcked(errors.New("connection lost"), 0) {
		t.Error("an error that names no delivery is taken as an ack")
	}
}
