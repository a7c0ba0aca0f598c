package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/dlq"
)

// TestLetterShowsOtherConsumersLetters: a message parked by three
// consumers has three letters; each letter's page lists the other two
// (linked, with their state), not letters of other messages, and a revision
// made from it is addressed to its own consumer only.
func TestLetterShowsOtherConsumersLetters(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		billing := h.park(letter("billing", "orders", "m-x", `{"n":1}`))
		search := h.park(letter("search", "orders", "m-x", `{"n":1}`))
		notification := h.park(letter("notification", "orders", "m-x", `{"n":1}`))
		unrelated := h.park(letter("search", "orders", "m-y", `{"n":2}`))

		others := func(id int64) []string {
			page := h.get(fmt.Sprintf("/console/dlq/%d", id))
			if !strings.Contains(page, `data-testid="letter-others"`) {
				t.Fatalf("letter %d: no list of the other consumers' letters", id)
			}
			var got []string
			for _, row := range strings.Split(page, `data-testid="letter-other"`)[1:] {
				row = row[:strings.Index(row, "</tr>")]
				for _, l := range []int64{billing, search, notification, unrelated} {
					if strings.Contains(row, fmt.Sprintf(`/dlq/%d"`, l)) {
						got = append(got, fmt.Sprintf("%d", l))
					}
				}
			}
			return got
		}
		if got, want := strings.Join(others(billing), ","), fmt.Sprintf("%d,%d", search, notification); got != want {
			t.Fatalf("billing's letter lists letters %s, want %s", got, want)
		}
		if r := h.post(fmt.Sprintf("/console/dlq/%d/revise", billing), url.Values{"payload": {`{"n":3}`}}); r.status != http.StatusSeeOther {
			t.Fatalf("revise: %d %s", r.status, r.body)
		}
		msgs := h.pub.published()
		if len(msgs) != 1 || msgs[0].Headers[broker.HeaderRedriveFor] != "billing" {
			t.Fatalf("published %+v, want one revision for billing", msgs)
		}
		// The revised letter (now discarded) is still listed on the others' pages.
		page := h.get(fmt.Sprintf("/console/dlq/%d", search))
		if got, want := strings.Join(others(search), ","), fmt.Sprintf("%d,%d", billing, notification); got != want {
			t.Fatalf("search's letter lists letters %s, want %s", got, want)
		}
		if !strings.Contains(page, string(dlq.Discarded)) {
			t.Fatal("search's letter page does not show billing's letter as discarded")
		}
		if got := others(unrelated); len(got) != 0 {
			t.Fatalf("a letter of another message lists %v", got)
		}
	})
}
