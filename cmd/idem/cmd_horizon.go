package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/horizon"
)

// runHorizon prints the replay horizons of the reference system (boxoffice)
// as configured: every horizon in the chain and every check that pairs a
// replay horizon with the record that must outlive it, then the weakest
// link.
func runHorizon(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "horizon", "[--nats URL] [--client-retry D] [--redrive-window D] [--json]")
	natsURL := fs.String("nats", "", "read the stream's max age and duplicate window from this NATS JetStream server (default: an embedded one with the reference system's stream)")
	clientRetry := fs.Duration("client-retry", 0, "declare how long clients retry one request with one Idempotency-Key (default: not declared)")
	redrive := fs.Duration("redrive-window", 0, "declare how long after a failure operators may redrive a dead letter (default: unlimited, letters stay parked until resolved)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *clientRetry < 0 || *redrive < 0 {
		return fmt.Errorf("%w: --client-retry and --redrive-window must not be negative", errUsage)
	}
	if env.CheckOnly {
		return nil
	}
	h, err := referenceHorizons(ctx, *natsURL)
	if err != nil {
		return hideURL(err, *natsURL)
	}
	h.ClientRetry = *clientRetry
	if *redrive > 0 {
		h.RedriveWindow = *redrive
	}
	weakest, ok := h.Weakest()
	if *asJSON {
		out := struct {
			System     horizon.System  `json:"system"`
			Chain      []horizon.Link  `json:"chain"`
			Checks     []horizon.Check `json:"checks"`
			Weakest    *horizon.Check  `json:"weakest,omitempty"`
			Undeclared []horizon.Check `json:"undeclared,omitempty"`
		}{System: h, Chain: h.Chain(), Checks: h.Checks(), Undeclared: h.Undeclared()}
		if ok {
			out.Weakest = &weakest
		}
		return printJSON(env, out)
	}
	tw := newTable(env)
	fmt.Fprintln(tw, "STAGE\tCOMPONENT\tHORIZON")
	for _, l := range h.Chain() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Stage, termSafe(l.Component), horizon.Format(l.Duration))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "REPLAY\tMUST BE COVERED BY\tMARGIN\tSTATUS")
	for _, c := range h.Checks() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", linkText(c.Replay), linkText(c.Guard), marginText(c), statusText(c))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ok {
		fmt.Fprintf(env.Stdout, "\nweakest link: %s must be covered by %s (margin %s): %s\n",
			linkText(weakest.Replay), linkText(weakest.Guard), marginText(weakest), statusText(weakest))
	}
	return nil
}

// referenceHorizons opens the reference system in a scratch directory
// (embedded SQLite, fake provider, and the embedded JetStream server unless
// natsURL is set) without running it, and reads its horizons.
func referenceHorizons(ctx context.Context, natsURL string) (horizon.System, error) {
	dir, err := os.MkdirTemp("", "idem-horizon-")
	if err != nil {
		return horizon.System{}, err
	}
	defer os.RemoveAll(dir)
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	sys, err := boxoffice.Open(ctx, boxoffice.Options{DataDir: dir, NATSURL: natsURL,
		Config: boxoffice.Config{WebhookSecrets: []string{"whsec_" + base64.StdEncoding.EncodeToString(b)}}})
	if err != nil {
		return horizon.System{}, err
	}
	defer sys.Close()
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return sys.Horizons(hctx)
}

func linkText(l horizon.Link) string {
	return fmt.Sprintf("%s %s (%s)", l.Stage, termSafe(l.Component), horizon.Format(l.Duration))
}

func marginText(c horizon.Check) string {
	switch {
	case c.Undeclared:
		return "-"
	case c.Guard.Duration == horizon.Unlimited:
		return "unlimited"
	case c.Replay.Duration == horizon.Unlimited:
		return "-unlimited"
	}
	return horizon.Format(c.Margin)
}

func statusText(c horizon.Check) string {
	switch {
	case c.Undeclared:
		return "not declared: cannot check"
	case c.OK:
		return "ok"
	case c.Enforced != "":
		return fmt.Sprintf("SHORT (%s; enforced: %s)", c.Severity, c.Enforced)
	}
	return fmt.Sprintf("SHORT (%s; not enforced)", c.Severity)
}
