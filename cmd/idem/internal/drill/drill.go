// Package drill is idem's fault drill: it runs the reference system
// (boxoffice) under every fault idem exists to survive, one named scenario
// each, and proves each scenario's invariant by querying the database and
// the e-mail provider afterwards — business effects equal intended effects,
// provider unique effects equal intended, nothing lost.
//
// The faults, one scenario each, in run order:
//
//  1. lost-response: the response to a committed request is lost and the
//     client retries with the same Idempotency-Key.
//  2. racing-duplicates: several requests with one key arrive at once.
//  3. key-reuse: a key is reused with another payload.
//  4. crash-before-ack: a consumer commits and crashes before acking, so
//     the broker redelivers.
//  5. webhook-replay: a webhook sender replays a delivery, and a forged
//     delivery arrives.
//  6. relay-double-publish: the outbox relay publishes twice (lost broker
//     acks, republishes after the broker's duplicate window).
//  7. worker-crash-after-call: the effect worker dies after the provider
//     call and before recording it.
//  8. expiry-late-retry: records expire before a late retry and a late
//     redelivery.
//  9. concurrent-delivery: two consumer instances receive one message at
//     once.
//  10. transient-permanent-dlq: transient errors, poison messages, the
//     dead-letter store and an operator's redrive.
//  11. out-of-order: events of different orders arrive out of order.
//  12. provider-timeout: the provider times out after performing the call.
//  13. replay-equivalence: a replayed response must equal the original and
//     stay within its tenant.
//  14. saga-crash-after-step: the saga worker dies after the payment
//     provider made a charge and before the step is recorded (with
//     --processes, a real SIGKILL of the worker process).
//  15. saga-compensation-race: a compensation is scheduled while its action
//     is in flight, or before the action started.
//  16. saga-compensation-timeout: charges and refunds time out at the
//     provider after they happened.
//  17. saga-duplicate-start: the same saga is started by racing duplicate
//     requests.
//  18. horizon-late-redrive: a message is processed, a second delivery
//     with the same id and another payload is parked for a fingerprint
//     mismatch, the original's inbox record expires and is collected, and
//     the operator then redrives the letter: the redrive must be refused,
//     or the second payload would be applied as a new message.
//  19. revise-one-consumer: one message is poisoned for three consumers of
//     its subject; the operator edits and redrives one consumer's letter
//     as a revision, redrives another's as is, and the producer sends the
//     original again: each consumer must apply it exactly once (a
//     revision or redrive reaches the letter's own consumer only, and a
//     revision records the original as consumed).
//
// The saga scenarios (14–17) drive the box office's paid orders (the
// "paid-order" saga: reserve seats, charge, confirm; release and refund
// when compensated) and check in the database and at the payment provider:
// no order charged without seats reserved, every reservation of a failed
// order released, each charge and each refund at most once, and charged −
// refunded = the confirmed orders' totals.
//
// The "processes" scenario (--processes) combines 4, 6, 7 and 9 for real:
// relays, consumers and the effect worker run as child processes that are
// SIGKILLed at random and restarted.
//
// Every scenario runs the real components (HTTP middleware, outbox relay,
// broker, inbox consumers, effect worker, webhook receiver, dead-letter
// store) on a fresh environment: a new SQLite file and embedded JetStream
// server by default, or a fresh PostgreSQL schema and a dedicated stream on
// the given servers. Faults are injected through boxoffice.Hooks, the fake
// provider's fault switches and the HTTP client, never by simulating the
// components themselves.
//
// Every scenario runs on each broker (Config.Broker): JetStream; Kafka (an
// in-process kfake cluster per run, or Config.Kafka; a topic and consumer
// groups per scenario); RabbitMQ (Config.AMQPURL; a routing key and its
// queues per scenario). Where a scenario leaned on JetStream's semantics
// it checks the broker's own: Kafka and RabbitMQ have no publish dedup
// window, so every relay republish reaches the consumers and their inboxes
// absorb it; RabbitMQ replays nothing beyond a queue, so a late
// redelivery is the old events published again.
package drill

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/checks"
)

// Config configures a drill run.
type Config struct {
	// Orders is the number of orders of the load scenarios; the other
	// scenarios use a tenth of it (at least 20, at most 200). Defaults to
	// 2000.
	Orders int
	// Duplicates is the share of requests whose response is lost and
	// retried (and of webhook replays). Defaults to 0.3.
	Duplicates float64
	// Crash is the share of deliveries / effect calls hit by a simulated
	// crash. Defaults to 0.1.
	Crash float64
	// Workers is the number of concurrent HTTP clients. Defaults to 8.
	Workers int
	// Seed seeds every random choice. Defaults to 1.
	Seed uint64
	// DatabaseURL is a postgres:// URL to run on PostgreSQL (a fresh schema
	// per scenario, dropped afterwards) or a mysql:// URL to run on MySQL
	// or MariaDB (a fresh database per scenario, dropped afterwards).
	// Defaults to SQLite files in a temporary directory.
	DatabaseURL string
	// NATSURL is a NATS server with JetStream (a dedicated stream per
	// scenario, deleted afterwards). Defaults to an embedded server per
	// scenario.
	NATSURL string
	// Broker is the broker the reference system runs on: "nats" (the
	// default: JetStream, embedded unless NATSURL is set), "kafka" (an
	// in-process kfake cluster unless Kafka is set) or "rabbitmq" (AMQPURL,
	// required).
	Broker string
	// Kafka lists the seed brokers (host:port) of a real Kafka cluster for
	// Broker "kafka". Empty: an in-process kfake cluster.
	Kafka []string
	// AMQPURL is the RabbitMQ server (amqp://…) for Broker "rabbitmq".
	AMQPURL string
	// NATSCluster, when at least 3, runs the drill on an embedded JetStream
	// cluster of that many nodes on loopback (streams with three replicas)
	// whose stream leader, and at random a follower, are killed and
	// restarted during the load scenarios. The report counts the node
	// kills and leader changes (Report.Cluster).
	NATSCluster int
	// Scenarios to run, by name. Defaults to all (without "processes"
	// unless Processes is set).
	Scenarios []string
	// Processes adds the "processes" scenario: relays, consumers and the
	// effect worker run as child processes (Executable worker …) that are
	// SIGKILLed at random and restarted.
	Processes bool
	// Executable is the idem binary for Processes. Defaults to the running
	// executable.
	Executable string
	// Kills is the minimum number of SIGKILLs in the processes scenario.
	// Defaults to 20.
	Kills int
	// Timeout bounds one scenario's wait for the system to settle.
	// Defaults to 60s.
	Timeout time.Duration
	// TempDir holds the embedded default's files. Defaults to a new
	// temporary directory, removed at the end.
	TempDir string
	// Progress, if set, is called when a scenario starts (done = scenarios
	// finished so far) and once at the end.
	Progress func(done, total int, scenario string)
	// Logger receives the components' logs. Defaults to discarding.
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	c.Orders = cmp.Or(c.Orders, 2000)
	c.Workers = cmp.Or(c.Workers, 8)
	c.Seed = cmp.Or(c.Seed, 1)
	c.Kills = cmp.Or(c.Kills, 20)
	c.Timeout = cmp.Or(c.Timeout, 60*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case c.Orders < 1:
		return checks.Optionf("drill: --orders must be at least 1")
	case c.Duplicates < 0 || c.Duplicates > 1:
		return checks.Optionf("drill: --duplicates must be in [0, 1]")
	case c.Crash < 0 || c.Crash > 1:
		return checks.Optionf("drill: --crash must be in [0, 1]")
	case c.Workers < 1:
		return checks.Optionf("drill: --workers must be at least 1")
	case c.Broker != "" && c.Broker != "nats" && c.Broker != "kafka" && c.Broker != "rabbitmq":
		return checks.Optionf("drill: unknown --broker %q (want nats, kafka or rabbitmq)", c.Broker)
	case c.NATSCluster != 0 && c.NATSCluster < 3:
		return checks.Optionf("drill: --nats-cluster must be at least 3 (a JetStream cluster needs a quorum)")
	case c.NATSCluster != 0 && (c.NATSURL != "" || (c.Broker != "" && c.Broker != "nats")):
		return checks.Optionf("drill: --nats-cluster runs its own embedded cluster: it excludes --nats and --broker kafka|rabbitmq")
	}
	if err := c.brokerOptions(); err != nil {
		return err
	}
	if c.DatabaseURL != "" && !ValidDatabaseURL(c.DatabaseURL) {
		return checks.Optionf("drill: --db must be a postgres:// or mysql:// URL (the default is a fresh SQLite file per scenario)")
	}
	return nil
}

// Result is the verdict of one scenario.
type Result struct {
	Name                 string        `json:"name"`
	Invariant            string        `json:"invariant"`
	Expected             string        `json:"expected"`
	Observed             string        `json:"observed"`
	DuplicatesSuppressed int64         `json:"duplicates_suppressed"`
	Lost                 int64         `json:"lost"`
	Pass                 bool          `json:"pass"`
	Duration             time.Duration `json:"-"`
	DurationMS           int64         `json:"duration_ms"`
	// Orders is how many orders the scenario placed when it is not
	// --orders: all but the load scenarios use a tenth of it, at least 20
	// and at most 200 (0 when the scenario places --orders or none).
	Orders int `json:"orders,omitempty"`
	// Error explains a scenario that could not run to its check.
	Error string `json:"error,omitempty"`
}

// Report is the outcome of a drill run.
type Report struct {
	Pass      bool     `json:"pass"`
	Scenarios []Result `json:"scenarios"`
	// Cluster reports the node kills and leader changes of a
	// --nats-cluster run (nil otherwise).
	Cluster *ClusterReport `json:"cluster,omitempty"`
}

// scenario is one named drill.
type scenario struct {
	name      string
	faults    string // the numbers of the faults it covers, in the list of the package doc
	invariant string
	run       func(ctx context.Context, r *runner, res *Result) error
}

// Names returns the scenario names in run order ("processes" last).
func Names() []string {
	var out []string
	for _, s := range scenarios() {
		out = append(out, s.name)
	}
	return out
}

// Run runs the drill and returns its report. An error is returned only
// for a configuration problem (see [Check]: bad options, a --db or --nats
// target that cannot be used) or an environment that cannot be set up at
// all; scenario failures are in the report.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	if err := Check(ctx, cfg); err != nil {
		return Report{}, err
	}
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	chosen, err := cfg.chosen()
	if err != nil {
		return Report{}, err
	}
	r, err := newRunner(cfg)
	if err != nil {
		return Report{}, err
	}
	defer r.close()
	rep = Report{Pass: true}
	if cfg.clustered() {
		c, err := r.startCluster(ctx)
		if err != nil {
			return Report{}, err
		}
		defer func() { rep.Cluster = c.stop() }()
	}
	for i, s := range chosen {
		if cfg.Progress != nil {
			cfg.Progress(i, len(chosen), s.name)
		}
		res := r.runScenario(ctx, s)
		rep.Scenarios = append(rep.Scenarios, res)
		rep.Pass = rep.Pass && res.Pass
		if ctx.Err() != nil {
			break
		}
	}
	if cfg.Progress != nil {
		cfg.Progress(len(chosen), len(chosen), "")
	}
	return rep, nil
}

// chosen returns the scenarios cfg selects, in run order.
func (c *Config) chosen() ([]scenario, error) {
	all := scenarios()
	var chosen []scenario
	if len(c.Scenarios) == 0 || slices.Contains(c.Scenarios, "all") {
		for _, s := range all {
			if s.name != "processes" || c.Processes {
				chosen = append(chosen, s)
			}
		}
		return chosen, nil
	}
	for _, name := range c.Scenarios {
		i := slices.IndexFunc(all, func(s scenario) bool { return s.name == name })
		if i < 0 {
			return nil, checks.Optionf("drill: unknown scenario %q (have %s)", name, strings.Join(Names(), ", "))
		}
		chosen = append(chosen, all[i])
	}
	if c.Processes && !slices.Contains(c.Scenarios, "processes") {
		chosen = append(chosen, all[len(all)-1])
	}
	return chosen, nil
}

func (r *runner) runScenario(ctx context.Context, s scenario) (res Result) {
	res = Result{Name: s.name, Invariant: s.invariant}
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			res.Pass = false
			res.Error = fmt.Sprint("panic: ", p)
		}
		res.Duration = time.Since(start)
		res.DurationMS = res.Duration.Milliseconds()
		// A driver's error may quote a target URL: never print its secrets.
		res.Error = scrub(res.Error, r.cfg.DatabaseURL, r.cfg.NATSURL)
		if res.Error != "" && res.Observed == "" {
			res.Observed = "error: " + res.Error
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout+30*time.Second)
	defer cancel()
	if err := s.run(sctx, r, &res); err != nil {
		res.Pass = false
		res.Error = err.Error()
	}
	return res
}

// ReportWidth is the widest line, in columns, of the human report
// ([Report.WriteTable]).
const ReportWidth = 100

// WriteTable writes the human report: a table of one row per scenario
// (verdict, losses, suppressed duplicates, time), then each scenario's
// invariant, expected and observed facts and error below it, wrapped to
// fit [ReportWidth] columns, then the verdict line. WriteJSON has the same
// facts as one JSON object.
func (rep Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tVERDICT\tLOST\tDUP SUPPRESSED\tTIME")
	for _, s := range rep.Scenarios {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.Name, s.verdict(), s.Lost, s.DuplicatesSuppressed, s.Duration.Round(time.Millisecond))
	}
	tw.Flush()
	for _, s := range rep.Scenarios {
		fmt.Fprintln(w)
		writeWrapped(w, "", "  ", s.Name+" ("+s.verdict()+"): "+s.Invariant)
		if s.Orders > 0 {
			writeWrapped(w, "  orders:   ", "            ", fmt.Sprintf("%d (a focused scenario places a tenth of --orders, at least 20, at most 200)", s.Orders))
		}
		writeWrapped(w, "  expected: ", "            ", s.Expected)
		writeWrapped(w, "  observed: ", "            ", s.Observed)
		if s.Error != "" && s.Observed != "error: "+s.Error {
			writeWrapped(w, "  error: ", "         ", s.Error)
		}
	}
	pass, n := 0, len(rep.Scenarios)
	for _, s := range rep.Scenarios {
		if s.Pass {
			pass++
		}
	}
	if rep.Cluster != nil {
		fmt.Fprintf(w, "\n%s\n", rep.Cluster)
	}
	if rep.Pass {
		fmt.Fprintf(w, "\nPASS: %d/%d scenarios kept their invariant.\n", pass, n)
	} else {
		fmt.Fprintf(w, "\nFAIL: %d/%d scenarios kept their invariant.\n", pass, n)
	}
}

func (r Result) verdict() string {
	if r.Pass {
		return "PASS"
	}
	return "FAIL"
}

// writeWrapped writes text after first, wrapped at spaces to ReportWidth
// columns, continuation lines starting with cont. Each line of a
// multi-line text keeps its own indentation; a word too long for a line is
// cut.
func writeWrapped(w io.Writer, first, cont, text string) {
	prefix := first
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := strings.Repeat(" ", min(len(line)-len(trimmed), 20))
		cur := prefix + indent
		curLen := utf8.RuneCountInString(cur)
		empty := true
		flush := func() {
			fmt.Fprintln(w, strings.TrimRight(cur, " "))
			cur = cont + indent + "  "
			curLen = utf8.RuneCountInString(cur)
			empty = true
		}
		for _, word := range strings.Fields(trimmed) {
			n := utf8.RuneCountInString(word)
			if !empty && curLen+1+n > ReportWidth {
				flush()
			}
			for curLen+n > ReportWidth { // cut a word longer than a line
				room := max(ReportWidth-curLen, 1)
				runes := []rune(word)
				cur += string(runes[:room])
				word, n = string(runes[room:]), n-room
				flush()
			}
			if !empty {
				cur += " "
				curLen++
			}
			cur += word
			curLen += n
			empty = false
		}
		fmt.Fprintln(w, strings.TrimRight(cur, " "))
		prefix = cont
	}
}

// WriteJSON writes the report as one JSON object.
func (rep Report) WriteJSON(w io.Writer) error {
	if rep.Scenarios == nil {
		rep.Scenarios = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(rep)
}

// rng is a goroutine-safe seeded random source.
type rng struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRNG(seed uint64, stream uint64) *rng {
	return &rng{r: rand.New(rand.NewPCG(seed, stream))}
}

func (g *rng) chance(p float64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.Float64() < p
}

func (g *rng) intn(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.IntN(n)
}
