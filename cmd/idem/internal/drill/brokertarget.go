package drill

// This file holds what the drill needs of its broker target: checking it,
// and a dedicated stream, topic or set of queues for each scenario.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	bjs "github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/redact"
)

// Broker names of Config.Broker.
const (
	brokerNATS     = boxoffice.BrokerNATS
	brokerKafka    = boxoffice.BrokerKafka
	brokerRabbitMQ = boxoffice.BrokerRabbitMQ
)

// broker returns the broker of the run ("nats" when none was named).
func (c *Config) broker() string {
	if c.Broker == "" {
		return brokerNATS
	}
	return c.Broker
}

// brokerOptions checks that each broker's address is given for its broker
// only, and that RabbitMQ has one.
func (c *Config) brokerOptions() error {
	b := c.broker()
	switch {
	case c.NATSURL != "" && b != brokerNATS:
		return checks.Optionf("drill: --nats is for --broker nats, not %s", b)
	case len(c.Kafka) > 0 && b != brokerKafka:
		return checks.Optionf("drill: --kafka is for --broker kafka, not %s", b)
	case c.AMQPURL != "" && b != brokerRabbitMQ:
		return checks.Optionf("drill: --amqp is for --broker rabbitmq, not %s", b)
	case b == brokerRabbitMQ && c.AMQPURL == "":
		return checks.Optionf("drill: --broker rabbitmq needs --amqp amqp://user:pass@host:5672/")
	}
	for _, s := range c.Kafka {
		if h := strings.TrimSpace(s); h == "" || !strings.Contains(h, ":") {
			return checks.Optionf("drill: --kafka wants host:port[,host:port…]")
		}
	}
	if c.AMQPURL != "" {
		if u, err := dsn.ParseBroker(c.AMQPURL); err != nil || u.Kind != dsn.AMQP {
			return checks.Optionf("drill: --amqp must be an amqp:// or amqps:// URL")
		}
	}
	return nil
}

// checkBroker makes sure the broker cfg names can be used: the NATS server
// of --nats has JetStream, the Kafka cluster of --kafka answers, the
// RabbitMQ server of --amqp accepts the credentials. The in-process
// defaults need no check.
func checkBroker(ctx context.Context, cfg Config) error {
	switch {
	case cfg.NATSURL != "":
		return checkNATS(ctx, cfg.NATSURL)
	case len(cfg.Kafka) > 0:
		return checkKafka(ctx, cfg.Kafka)
	case cfg.AMQPURL != "":
		return checkAMQP(cfg.AMQPURL)
	}
	return nil
}

func checkKafka(ctx context.Context, seeds []string) error {
	shown := strings.Join(seeds, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(5*time.Second))
	if err != nil {
		return targetErrorf("", err, "drill: --kafka %s", shown)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		return targetErrorf("", err, "drill: --kafka %s: Kafka does not answer", shown)
	}
	return nil
}

func checkAMQP(raw string) error {
	conn, err := amqp091.DialConfig(raw, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return targetErrorf(raw, err, "drill: --amqp %s: cannot connect to RabbitMQ", redact.URL(raw))
	}
	return conn.Close()
}

// kafkaCluster is the run's in-process Kafka cluster, started on first
// use and closed with the runner.
type kafkaCluster struct {
	once sync.Once
	c    *boxoffice.KafkaCluster
	err  error
}

// kafkaSeeds returns the seed brokers of the run: --kafka, or the
// in-process cluster's loopback listeners (which child processes reach
// too).
func (r *runner) kafkaSeeds() ([]string, error) {
	if len(r.cfg.Kafka) > 0 {
		return r.cfg.Kafka, nil
	}
	r.kafka.once.Do(func() { r.kafka.c, r.kafka.err = boxoffice.StartKafka() })
	if r.kafka.err != nil {
		return nil, r.kafka.err
	}
	return r.kafka.c.ListenAddrs(), nil
}

// kafkaSessionTimeout is the consumer groups' session timeout of the run:
// short on the in-process cluster (a SIGKILLed child's partitions move on
// within seconds), the client's default on a real cluster.
func (r *runner) kafkaSessionTimeout() time.Duration {
	if len(r.cfg.Kafka) > 0 {
		return 0
	}
	return boxoffice.KafkaSessionTimeout
}

func (r *runner) closeBroker() {
	if r.kafka.c != nil {
		r.kafka.c.Close()
	}
}

// drillDurables are the durable subscriptions a scenario may create: the
// box office's consumers with every DurableSuffix the scenarios use, and
// the ledger of horizon-late-redrive and the consumers of
// revise-one-consumer.
func drillDurables() []string {
	var out []string
	for _, suffix := range []string{"", "-a", "-b", "-late"} {
		for _, c := range []string{boxoffice.ConsumerNotification, boxoffice.ConsumerBilling, boxoffice.ConsumerSearch} {
			out = append(out, c+suffix)
		}
	}
	return append(append(out, ledgerConsumer), reviseConsumers...)
}

// scenarioBroker points the scenario o at the drill's broker, each
// scenario on its own: on NATS with --nats, a dedicated stream and subject
// (deleted by the returned cleanup; without --nats, o is left alone and
// boxoffice.Open starts an embedded server); on Kafka a dedicated topic
// (and consumer groups named after it) on the run's cluster, deleted
// after; on RabbitMQ a dedicated subject, so dedicated queues, deleted
// after.
func (r *runner) scenarioBroker(_ context.Context, o *boxoffice.Options) (func(), error) {
	id := randHex(4)
	subject := "idem-drill." + id + "." + boxoffice.Subject
	switch r.cfg.broker() {
	case brokerKafka:
		seeds, err := r.kafkaSeeds()
		if err != nil {
			return nil, err
		}
		o.Broker, o.Kafka, o.KafkaSessionTimeout = brokerKafka, seeds, r.kafkaSessionTimeout()
		o.Config.Subject = subject
		return func() { deleteTopic(seeds, subject) }, nil
	case brokerRabbitMQ:
		o.Broker, o.AMQPURL = brokerRabbitMQ, r.cfg.AMQPURL
		o.Config.Subject = subject
		url := r.cfg.AMQPURL
		return func() { deleteQueues(url, subject) }, nil
	}
	if r.cfg.NATSURL == "" {
		return nil, nil
	}
	o.NATSURL = r.cfg.NATSURL
	o.Stream = "IDEM_DRILL_" + strings.ToUpper(id)
	o.Config.Subject = subject
	stream := o.Stream
	return func() { r.deleteStream(stream) }, nil
}

func (r *runner) deleteStream(stream string) {
	nc, js, err := bjs.Dial(r.cfg.NATSURL)
	if err != nil {
		return
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, stream)
}

// deleteTopic deletes a scenario's topic (best effort: a clean-up).
func deleteTopic(seeds []string, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := boxoffice.DialKafka(ctx, boxoffice.KafkaConfig{Brokers: seeds, Topic: topic})
	if err != nil {
		return
	}
	defer b.Close()
	_ = b.DeleteTopic(ctx)
}

// deleteQueues deletes a scenario's queues (best effort: a clean-up).
func deleteQueues(url, subject string) {
	b, err := boxoffice.DialAMQP(context.Background(), boxoffice.AMQPConfig{URL: url, Subject: subject})
	if err != nil {
		return
	}
	_ = b.DeleteQueues(drillDurables()...)
}

// declareDurables makes sure the durable subscriptions of consumers with
// suffix exist before anything more is published: a no-op on JetStream and
// Kafka (a new durable or group starts at the oldest message kept); on
// RabbitMQ it declares their queues, since a message reaches only the
// queues bound when it is published (no replay beyond the queue).
func (e *env) declareDurables(suffix string) error {
	b, ok := e.sys.Config().Broker.(*boxoffice.AMQPBroker)
	if !ok {
		return nil
	}
	var errs []error
	for _, c := range []string{boxoffice.ConsumerNotification, boxoffice.ConsumerBilling, boxoffice.ConsumerSearch} {
		errs = append(errs, b.Declare(c+suffix))
	}
	return errors.Join(errs...)
}

// brokerDedups reports whether the run's broker drops a message id
// published again inside a duplicate window (JetStream); Kafka and
// RabbitMQ deliver every copy and the inboxes absorb them.
func (r *runner) brokerDedups() bool { return r.cfg.broker() == brokerNATS }
