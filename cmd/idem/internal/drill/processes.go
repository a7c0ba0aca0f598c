package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
)

// child is one "idem worker" process the drill kills and restarts.
type child struct {
	name string
	args []string
	env  []string // added to the parent's environment (secrets: not in argv, which ps shows)
	log  *os.File

	mu  sync.Mutex // protects cmd
	cmd *exec.Cmd
}

func (c *child) start(exe string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := exec.Command(exe, append([]string{"worker"}, c.args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdout, cmd.Stderr = c.log, c.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("drill: start %s: %w", c.name, err)
	}
	c.cmd = cmd
	return nil
}

// take returns the running process and forgets it (nil when none runs).
func (c *child) take() *exec.Cmd {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := c.cmd
	c.cmd = nil
	return cmd
}

// kill SIGKILLs the child and reaps it.
func (c *child) kill() {
	cmd := c.take()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// stop asks the child to shut down cleanly (SIGTERM), then kills it.
func (c *child) stop() {
	cmd := c.take()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// parent is what a scenario with "idem worker" children runs in the drill
// process: the API (and the fake provider) in-process on dir, the embedded
// JetStream on NATS unless --nats, and what the children need to join
// them (the database and broker addresses, in their environment).
type parent struct {
	e    *env
	exe  string   // the idem binary of the children
	env  []string // the children's environment (secrets: not in argv, which ps shows)
	args []string // the children's --provider, --schema, --stream and --subject
	srv  *embedded.Server
}

func (r *runner) newParent(ctx context.Context, name, dir string) (_ *parent, err error) {
	p := &parent{exe: r.cfg.Executable}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.exe == "" {
		if p.exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	// Private: the directory holds the children's logs (and, by default,
	// the database with customer e-mails and stored responses).
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The embedded default on NATS: the parent serves JetStream on
	// loopback. The children share its SQLite file (or --db), and on Kafka
	// the run's cluster (the in-process one listens on loopback too).
	natsURL := r.cfg.NATSURL
	if r.cfg.broker() == brokerNATS && natsURL == "" {
		if p.srv, err = embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "jetstream")}); err != nil {
			return nil, err
		}
		natsURL = p.srv.ClientURL()
	}
	if p.e, err = r.newEnv(ctx, name, false, func(o *boxoffice.Options) {
		o.Roles = []boxoffice.Role{boxoffice.RoleAPI}
		if natsURL != "" {
			o.NATSURL = natsURL
		}
		o.DataDir = dir
	}); err != nil {
		return nil, err
	}
	dbURL := p.e.opts.DatabaseURL
	if dbURL == "" {
		dbURL = "sqlite://" + filepath.Join(dir, "idem.db")
	}
	// The NATS URL carries the embedded server's password, an AMQP URL
	// may carry one, and --db may carry one: hand them over in the
	// environment, not on the command line.
	p.env = []string{"IDEM_DATABASE_URL=" + dbURL}
	p.args = []string{"--provider", p.e.sys.Config().ProviderURL}
	switch o := p.e.opts; o.Broker {
	case brokerKafka:
		p.env = append(p.env, "IDEM_KAFKA_BROKERS="+strings.Join(o.Kafka, ","))
		p.args = append(p.args, "--broker", brokerKafka)
		if o.KafkaSessionTimeout > 0 {
			p.args = append(p.args, "--kafka-session-timeout", o.KafkaSessionTimeout.String())
		}
	case brokerRabbitMQ:
		p.env = append(p.env, "IDEM_AMQP_URL="+o.AMQPURL)
		p.args = append(p.args, "--broker", brokerRabbitMQ)
	default:
		p.env = append(p.env, "IDEM_NATS_URL="+natsURL)
	}
	if p.e.opts.Schema != "" {
		p.args = append(p.args, "--schema", p.e.opts.Schema)
	}
	if p.e.opts.Stream != "" {
		p.args = append(p.args, "--stream", p.e.opts.Stream)
	}
	if subj := p.e.sys.Config().Subject; subj != boxoffice.Subject {
		p.args = append(p.args, "--subject", subj)
	}
	return p, nil
}

func (p *parent) close() {
	if p.e != nil {
		p.e.close()
	}
	if p.srv != nil {
		p.srv.Close()
	}
}

func processes(ctx context.Context, r *runner, res *Result) error {
	n := r.cfg.Orders
	dir := filepath.Join(r.tmp, "processes")
	pa, err := r.newParent(ctx, "processes", dir)
	if err != nil {
		return err
	}
	defer pa.close()
	e, exe, childEnv := pa.e, pa.exe, pa.env
	common := append(slices.Clone(pa.args),
		"--ack-wait", "1s", "--duplicates", duplicateWindow.String(), "--effect-lease", "2s", "--claim-ttl", "2s", "--poll", "20ms")
	relays, consumers := 1, 2
	if r.cfg.DatabaseURL != "" {
		relays, consumers = 2, 3
	}
	var children []*child
	add := func(name, roles string) error {
		f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		c := &child{name: name, args: append([]string{"--role", roles, "-v"}, common...), env: childEnv, log: f}
		children = append(children, c)
		return c.start(exe)
	}
	defer func() {
		for _, c := range children {
			c.stop()
			c.log.Close()
		}
	}()
	for i := range relays {
		if err := add(fmt.Sprintf("relay-%d", i), "relay"); err != nil {
			return err
		}
	}
	for i := range consumers {
		if err := add(fmt.Sprintf("consumers-%d", i), "consumers"); err != nil {
			return err
		}
	}
	if err := add("effects-0", "effects"); err != nil {
		return err
	}

	// The killer: SIGKILL a random child at random moments and restart it,
	// at least Kills times, while the orders flow.
	var kills atomic.Int64
	var sendingDone atomic.Bool
	killErr := make(chan error, 1)
	g := newRNG(r.cfg.Seed, 14)
	go func() {
		for {
			if sendingDone.Load() && kills.Load() >= int64(r.cfg.Kills) {
				killErr <- nil
				return
			}
			select {
			case <-ctx.Done():
				killErr <- ctx.Err()
				return
			case <-time.After(time.Duration(100+g.intn(300)) * time.Millisecond):
			}
			c := children[g.intn(len(children))]
			c.kill()
			kills.Add(1)
			if err := c.start(exe); err != nil {
				killErr <- err
				return
			}
		}
	}()
	s := r.sendOrders(ctx, e, n, "proc", events5, public, r.cfg.Duplicates, 15)
	sendingDone.Store(true)
	if err := <-killErr; err != nil {
		return errors.Join(err, s.err())
	}
	settleStart := time.Now()
	f, serr := e.settle(ctx, facts.converged)
	res.DuplicatesSuppressed = dups(f.stats)
	pipelineResult(res, f, n, fmt.Sprintf(" kills>=%d", r.cfg.Kills),
		fmt.Sprintf(" kills=%d processes=%d replays=%d unequal=%d settled_in=%s", kills.Load(), len(children), s.replays, s.mismatch,
			time.Since(settleStart).Round(time.Millisecond)),
		s.err() == nil && s.mismatch == 0 && kills.Load() >= int64(r.cfg.Kills))
	return errors.Join(s.err(), serr)
}
