package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem/internal/idemtestcase"
)

func TestInboxPassesCorrectHandler(t *testing.T) { eachBackend(t, idemtestcase.InboxPasses) }

func TestInboxCatchesMessageIDFromPayload(t *testing.T) {
	eachBackend(t, idemtestcase.InboxMessageIDFromPayload)
}

func TestInboxCatchesNotificationOutsideTransaction(t *testing.T) {
	eachBackend(t, idemtestcase.InboxNotificationOutsideTransaction)
}
