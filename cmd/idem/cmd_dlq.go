package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/redact"
)

// dlqFlags are the flags of every dlq action.
type dlqFlags struct {
	db, consumer, since, until, class, state, by, nats string
	broker, exchange                                   string
	all, asJSON                                        bool
	limit                                              int
	force                                              bool
	reason                                             string
	retention                                          time.Duration
}

func runDLQ(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "dlq", "list|show|redrive|discard [flags] [id…]")
	var f dlqFlags
	fs.StringVar(&f.db, "db", "", "database URL (postgres://…, mysql://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	fs.StringVar(&f.consumer, "consumer", "", "only letters of this consumer")
	fs.StringVar(&f.since, "since", "", "only letters last failed at or after this time (RFC 3339, or a duration ago such as 24h)")
	fs.StringVar(&f.until, "until", "", "only letters last failed before this time (RFC 3339, or a duration ago)")
	fs.StringVar(&f.class, "class", "", "only letters of this error class (permanent, invalid_input, fingerprint_mismatch, transient, panic, …)")
	fs.StringVar(&f.state, "state", "parked", "list: only letters in this state (parked, redriven, discarded, any)")
	fs.BoolVar(&f.all, "all", false, "redrive/discard: every parked letter matching the filters instead of listed ids")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")
	fs.StringVar(&f.by, "by", "", "operator name recorded on redrive/discard (default $USER)")
	fs.StringVar(&f.nats, "nats", "", "redrive: NATS JetStream URL to republish to (default $IDEM_NATS_URL)")
	fs.StringVar(&f.broker, "broker", "", "redrive: broker URL to republish to: nats://… (JetStream), amqp://… or amqps://… (RabbitMQ), kafka://host:port[,host:port] (Kafka); default $IDEM_BROKER_URL, else --nats")
	fs.StringVar(&f.exchange, "exchange", "", "redrive to RabbitMQ: the exchange to publish to, the letter's source as routing key (default: the default exchange, which routes to the queue named by the source; the reference system's queues are bound to amq.direct)")
	fs.IntVar(&f.limit, "limit", 100, "list: at most this many letters (0 = no limit)")
	fs.BoolVar(&f.force, "force", false, "redrive: redrive letters refused because their message id may have been processed and forgotten (needs --reason)")
	fs.StringVar(&f.reason, "reason", "", "redrive/discard: why, recorded in the audit log ('idem audit list'); with --force, why it is safe (also recorded with the letter)")
	fs.DurationVar(&f.retention, "inbox-retention", 0, "redrive: a shorter inbox retention to judge letters by than the one each consumer recorded when it started "+
		"(default: the recorded one, 7 days for a consumer that recorded none); a longer one is refused")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	retentionSet := false
	fs.Visit(func(fl *flag.Flag) { retentionSet = retentionSet || fl.Name == "inbox-retention" })
	pos := fs.Args()
	if len(pos) == 0 {
		return fmt.Errorf("%w: missing action (list, show, redrive or discard; run 'idem dlq -h')", errUsage)
	}
	action, rest := pos[0], pos[1:]
	filter, err := f.filter(time.Now())
	if err != nil {
		return err
	}
	ids := make([]int64, 0, len(rest))
	for _, a := range rest {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("%w: %q is not a dead-letter id", errUsage, a)
		}
		ids = append(ids, id)
	}
	switch action {
	case "list":
	case "show":
		if len(ids) == 0 {
			return fmt.Errorf("%w: show needs at least one id", errUsage)
		}
	case "redrive", "discard":
		if len(ids) == 0 && !f.all {
			return fmt.Errorf("%w: %s needs ids or --all", errUsage, action)
		}
		if len(ids) > 0 && f.all {
			return fmt.Errorf("%w: give ids or --all, not both", errUsage)
		}
		if (f.force || retentionSet) && action == "discard" {
			return fmt.Errorf("%w: --force and --inbox-retention are for redrive", errUsage)
		}
		if f.force && strings.TrimSpace(f.reason) == "" {
			return fmt.Errorf("%w: --force needs --reason \"why it is safe\"", errUsage)
		}
		if retentionSet && f.retention <= 0 {
			return fmt.Errorf("%w: --inbox-retention must be positive", errUsage)
		}
	default:
		return fmt.Errorf("%w: unknown action %q (want list, show, redrive or discard)", errUsage, action)
	}
	if f.by == "" {
		f.by = dlqOr(env.Getenv("USER"), "idem-cli")
	}
	if env.CheckOnly {
		return nil
	}

	d, err := openSQL(ctx, databaseURL(env, f.db), mustExist)
	if err != nil {
		return err
	}
	defer d.Close()
	if ok, err := operator.DLQInstalled(ctx, d); err != nil {
		return err
	} else if !ok {
		return errors.New("the dead_letters table does not exist: run 'idem migrate up' first")
	}
	var claim func(string) time.Duration // nil: each consumer's recorded retention
	if retentionSet {
		claim = func(string) time.Duration { return f.retention }
	}
	store, err := dlq.New(d, dlq.Config{InboxRetention: claim})
	if err != nil {
		return err
	}

	switch action {
	case "list":
		ls, err := store.List(ctx, filter)
		if err != nil {
			return err
		}
		return dlqPrintLetters(env, ls, f.asJSON)
	case "show":
		var ls []dlq.Letter
		for _, id := range ids {
			l, err := store.Get(ctx, id)
			if err != nil {
				return err
			}
			ls = append(ls, l)
		}
		return dlqShowLetters(env, ls, f.asJSON)
	case "discard":
		if f.all {
			filter.State, filter.Limit = dlq.Parked, -1
			ls, err := store.List(ctx, filter)
			if err != nil {
				return err
			}
			ids = ids[:0]
			for _, l := range ls {
				ids = append(ids, l.ID)
			}
		}
		n := 0
		for _, id := range ids {
			if err := store.DiscardWith(ctx, id, f.by, dlq.DiscardOptions{Reason: f.reason}); err != nil {
				return fmt.Errorf("discarded %d, then: %w", n, err)
			}
			n++
		}
		return dlqReport(env, f.asJSON, "discarded", n)
	}

	// redrive
	if retentionSet {
		if err := dlqCheckClaim(ctx, store, filter, ids); err != nil {
			return err
		}
	}
	pub, err := f.publisher(env)
	if err != nil {
		return err
	}
	defer pub.Close()
	opt := dlq.RedriveOptions{Force: f.force, Reason: f.reason}
	if !f.all {
		n := 0
		for _, id := range ids {
			if _, err := store.RedriveWith(ctx, id, f.by, pub, opt); err != nil {
				return fmt.Errorf("redrove %d, then: %w", n, err)
			}
			n++
		}
		return dlqReport(env, f.asJSON, "redriven", n)
	}
	var bar *progressbar.ProgressBar
	progress := func(done, total int) {
		if bar == nil && total >= 20 && dlqIsTerminal(env) && !f.asJSON {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(env.Stderr),
				progressbar.OptionSetDescription("redriving"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
		}
		if bar != nil {
			_ = bar.Set(done)
		}
	}
	n, err := store.RedriveAllWith(ctx, filter, f.by, pub, opt, progress)
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("redrove %d, then: %w", n, err)
	}
	return dlqReport(env, f.asJSON, "redriven", n)
}

// dlqCheckClaim refuses, before anything is redriven, an --inbox-retention
// longer than the retention a consumer of the letters to redrive (ids, or
// the parked letters matching filter) recorded when it started.
func dlqCheckClaim[TTx any](ctx context.Context, store *dlq.Store[TTx], filter dlq.Filter, ids []int64) error {
	var ls []dlq.Letter
	if len(ids) == 0 {
		filter.State, filter.Limit = dlq.Parked, -1
		var err error
		if ls, err = store.List(ctx, filter); err != nil {
			return err
		}
	}
	for _, id := range ids {
		l, err := store.Get(ctx, id)
		if err != nil {
			return err
		}
		ls = append(ls, l)
	}
	seen := map[string]bool{}
	for _, l := range ls {
		if seen[l.Consumer] {
			continue
		}
		seen[l.Consumer] = true
		if _, err := store.InboxRetention(ctx, l.Consumer); errors.Is(err, dlq.ErrRetentionOverstated) {
			return fmt.Errorf("%w: --inbox-retention: %v", errUsage, err)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// publisher opens the broker redrives republish to: --broker (any broker
// idem ships, by its URL's scheme), else --nats (JetStream, as always),
// else $IDEM_BROKER_URL, else $IDEM_NATS_URL.
func (f dlqFlags) publisher(env *Env) (broker.Publisher, error) {
	if f.broker != "" && f.nats != "" {
		return nil, fmt.Errorf("%w: give --broker or --nats, not both", errUsage)
	}
	u, nats := f.broker, false
	switch {
	case u != "":
	case f.nats != "":
		u, nats = f.nats, true
	case env.Getenv("IDEM_BROKER_URL") != "":
		u = env.Getenv("IDEM_BROKER_URL")
	default:
		u, nats = env.Getenv("IDEM_NATS_URL"), true
	}
	if u == "" {
		return nil, fmt.Errorf("%w: redrive needs a broker: --broker URL (nats://, amqp://, kafka://) or --nats URL, or IDEM_BROKER_URL / IDEM_NATS_URL", errUsage)
	}
	b, err := parsePublisherURL(u, nats)
	if err != nil {
		return nil, err
	}
	if f.exchange != "" && b.Kind != dsn.AMQP {
		return nil, fmt.Errorf("%w: --exchange is for RabbitMQ (an amqp:// or amqps:// --broker)", errUsage)
	}
	return openPublisher(b, f.exchange)
}

// parsePublisherURL parses the broker URL u of a redrive through
// dsn.ParseBroker. When nats is set (--nats, $IDEM_NATS_URL) u is NATS
// whatever it looks like, and nats.Connect judges it, as --nats always
// did. Refusals are usage errors that name the URL redacted.
func parsePublisherURL(u string, nats bool) (dsn.Broker, error) {
	if nats {
		return dsn.Broker{Kind: dsn.NATS, URL: u}, nil
	}
	b, err := dsn.ParseBroker(u)
	var de *dsn.Error
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, dsn.ErrNoHost) && errors.As(err, &de) && de.Scheme == "kafka":
		return b, fmt.Errorf("%w: --broker %s: want kafka://host:port[,host:port]", errUsage, redact.URL(u))
	case errors.Is(err, dsn.ErrNoHost):
		return b, fmt.Errorf("%w: --broker %s: %v", errUsage, redact.URL(u), err)
	}
	return b, fmt.Errorf("%w: --broker %s: unknown broker scheme (want nats://, amqp://, amqps:// or kafka://)", errUsage, redact.URL(u))
}

// openPublisher opens a publisher on the parsed broker b: JetStream for
// NATS, RabbitMQ for AMQP (publishing to exchange), Kafka on b's seeds;
// the in-process memory broker is refused (no other process can reach
// it). Its Close closes what it opened; its errors never carry the URL's
// password.
func openPublisher(b dsn.Broker, exchange string) (broker.Publisher, error) {
	switch b.Kind {
	case dsn.NATS:
		nc, js, err := idemjetstream.Dial(b.URL)
		if err != nil {
			return nil, hideURL(err, b.URL)
		}
		pub, err := idemjetstream.NewPublisher(js, idemjetstream.PublisherConfig{})
		if err != nil {
			nc.Close()
			return nil, err
		}
		return closing{pub, nc.Close}, nil
	case dsn.AMQP:
		pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: b.URL, Exchange: exchange})
		if err != nil {
			return nil, hideURL(err, b.URL)
		}
		return pub, nil
	case dsn.Kafka:
		// A bounded delivery, so an unreachable cluster fails the redrive
		// (the letter stays parked) instead of hanging the command.
		pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: b.Seeds, Opts: []kgo.Opt{kgo.RecordDeliveryTimeout(30 * time.Second)}})
		if err != nil {
			return nil, hideURL(err, b.URL)
		}
		return pub, nil
	case dsn.Memory:
		return nil, fmt.Errorf("%w: the memory broker lives inside one process: redrive from that process (dlq.Store.Redrive with its publisher)", errUsage)
	}
	return nil, fmt.Errorf("%w: --broker %s: unknown broker scheme (want nats://, amqp://, amqps:// or kafka://)", errUsage, b)
}

// closing is a publisher that also closes its connection.
type closing struct {
	broker.Publisher
	conn func()
}

// Close closes the publisher, then its connection.
func (c closing) Close() error {
	err := c.Publisher.Close()
	c.conn()
	return err
}

// PublishResults forwards to the publisher's, so that a broker's duplicate
// report (JetStream) still reaches the redrive.
func (c closing) PublishResults(ctx context.Context, msgs ...idem.Message) ([]broker.PublishResult, error) {
	if rp, ok := c.Publisher.(broker.ResultPublisher); ok {
		return rp.PublishResults(ctx, msgs...)
	}
	return nil, c.Publisher.Publish(ctx, msgs...)
}

func (f dlqFlags) filter(now time.Time) (dlq.Filter, error) {
	flt := dlq.Filter{Consumer: f.consumer, ErrorClass: f.class, Limit: f.limit}
	if f.limit == 0 {
		flt.Limit = -1
	}
	switch f.state {
	case "any", "all", "":
	case string(dlq.Parked), string(dlq.Redriven), string(dlq.Discarded):
		flt.State = dlq.State(f.state)
	default:
		return flt, fmt.Errorf("%w: --state %q: want parked, redriven, discarded or any", errUsage, f.state)
	}
	var err error
	if flt.Since, err = dlqParseWhen(f.since, now); err != nil {
		return flt, fmt.Errorf("%w: --since: %v", errUsage, err)
	}
	if flt.Until, err = dlqParseWhen(f.until, now); err != nil {
		return flt, fmt.Errorf("%w: --until: %v", errUsage, err)
	}
	return flt, nil
}

// dlqParseWhen accepts RFC 3339 times and durations meaning "that long ago".
func dlqParseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Parse(time.RFC3339, s)
}

func dlqIsTerminal(env *Env) bool {
	f, ok := env.Stderr.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func dlqOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func dlqReport(env *Env, asJSON bool, verb string, n int) error {
	if asJSON {
		return json.NewEncoder(env.Stdout).Encode(map[string]int{verb: n})
	}
	fmt.Fprintf(env.Stdout, "%s %d dead letter(s)\n", verb, n)
	return nil
}

func dlqPrintLetters(env *Env, ls []dlq.Letter, asJSON bool) error {
	return printList(env, asJSON, ls, "no dead letters", "ID\tCONSUMER\tMESSAGE ID\tSOURCE\tCLASS\tATTEMPTS\tLAST FAILED\tSTATE\tERROR",
		func(l dlq.Letter) string {
			return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", l.ID, termSafe(l.Consumer), termSafe(l.MessageID),
				termSafe(l.Source), termSafe(l.ErrorClass), l.Attempts, l.LastFailedAt.Format(time.RFC3339),
				termSafe(string(l.State)), termSafe(dlqTruncate(l.Error, 60)))
		})
}

func dlqShowLetters(env *Env, ls []dlq.Letter, asJSON bool) error {
	if asJSON {
		if len(ls) == 1 {
			return printJSON(env, ls[0])
		}
		return printJSON(env, ls)
	}
	for i, l := range ls {
		if i > 0 {
			fmt.Fprintln(env.Stdout)
		}
		tw := newTable(env)
		row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, termSafe(v)) }
		row("id", strconv.FormatInt(l.ID, 10))
		row("consumer", l.Consumer)
		row("message id", l.MessageID)
		row("source", l.Source)
		row("position", l.Position)
		row("key", l.Key)
		row("state", string(l.State))
		row("error class", l.ErrorClass)
		row("error", l.Error)
		row("attempts", strconv.Itoa(l.Attempts))
		row("first failed", l.FirstFailedAt.Format(time.RFC3339Nano))
		row("last failed", l.LastFailedAt.Format(time.RFC3339Nano))
		if l.RevisionID != "" {
			note := ""
			if l.State == dlq.Parked {
				note = " (may be out: revise again or discard; not redriven)"
			}
			row("revision", l.RevisionID+note)
			if utf8.Valid(l.RevisionPayload) {
				row("revision payload", string(l.RevisionPayload))
			} else {
				row("revision payload", fmt.Sprintf("(%d bytes, binary) %x", len(l.RevisionPayload), l.RevisionPayload))
			}
		}
		if l.State != dlq.Parked {
			row("resolved by", l.ResolvedBy)
			row("resolved at", l.ResolvedAt.Format(time.RFC3339Nano))
		}
		hs, _ := json.Marshal(l.Headers)
		row("headers", string(hs))
		if utf8.Valid(l.Payload) {
			row("payload", string(l.Payload))
		} else {
			row("payload", fmt.Sprintf("(%d bytes, binary) %x", len(l.Payload), l.Payload))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func dlqTruncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
