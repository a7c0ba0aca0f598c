package drill_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/cmd/idem/internal/drill"
)

// brokerScenarios are the scenarios the broker tests run: the ones whose
// faults meet the broker (crashes before the ack, relay republishes
// without a dedup window, two durables at once, the dead letters and their
// redrive, a late redelivery after expiry, the late redrive's guard, a
// revision and a redrive for one consumer of three).
var brokerScenarios = []string{"crash-before-ack", "relay-double-publish", "concurrent-delivery",
	"transient-permanent-dlq", "expiry-late-retry", "horizon-late-redrive", "revise-one-consumer"}

// drillScenarios is the IDEM_TEST_DRILL_SCENARIOS override (a comma list,
// or "all") of the broker tests' scenarios.
func drillScenarios() []string {
	if v := os.Getenv("IDEM_TEST_DRILL_SCENARIOS"); v != "" {
		return strings.Split(v, ",")
	}
	return brokerScenarios
}

// TestDrillKafka runs the broker scenarios, shortened, on an in-process
// Kafka cluster (kfake): a topic and consumer groups per scenario.
func TestDrillKafka(t *testing.T) {
	sc := drillScenarios()
	rep, err := drill.Run(context.Background(), drill.Config{Broker: "kafka", Orders: 100, Workers: 4, Crash: 0.1, Duplicates: 0.3, TempDir: t.TempDir(), Seed: 3, Scenarios: sc})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, scenarioCount(sc))
}

// TestDrillRabbitMQ runs the broker scenarios, shortened, on the RabbitMQ
// of IDEM_TEST_AMQP_URL: queues per scenario, deleted after.
func TestDrillRabbitMQ(t *testing.T) {
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	sc := drillScenarios()
	rep, err := drill.Run(context.Background(), drill.Config{Broker: "rabbitmq", AMQPURL: url, Orders: 100, Workers: 4, Crash: 0.1, Duplicates: 0.3, TempDir: t.TempDir(), Seed: 3, Scenarios: sc})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, scenarioCount(sc))
}

// TestDrillProcessesKafka runs the processes scenario on the in-process
// Kafka cluster: the children reach it on loopback.
func TestDrillProcessesKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds idem and SIGKILLs its worker processes")
	}
	// Each SIGKILL costs the consumer groups a rebalance after the session
	// timeout. Under CI's -race load, with the other packages' tests on the
	// same two cores, one run with 13 kills had 41 of 150 e-mails still
	// unsent when a minute ran out (the same test settles in about 40 s on
	// an idle machine). The invariant is unchanged (every e-mail sent
	// once, nothing lost); only the wait for it is longer.
	rep, err := drill.Run(context.Background(), drill.Config{Broker: "kafka", Orders: 150, Workers: 4, Kills: 8, TempDir: t.TempDir(),
		Seed: 5, Scenarios: []string{"processes"}, Executable: buildIdem(t), Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, 1)
}

func scenarioCount(sc []string) int {
	if len(sc) == 1 && sc[0] == "all" {
		return len(drill.Names()) - 1
	}
	return len(sc)
}

// TestDrillBrokerOptions: each broker's address only with its broker,
// RabbitMQ only with its URL, an unknown broker: configuration errors
// before anything runs.
func TestDrillBrokerOptions(t *testing.T) {
	for _, c := range []drill.Config{
		{Broker: "pulsar"},
		{Broker: "rabbitmq"},
		{Broker: "rabbitmq", AMQPURL: "http://example.com/"},
		{Broker: "nats", Kafka: []string{"127.0.0.1:9092"}},
		{Kafka: []string{"127.0.0.1:9092"}},
		{Broker: "kafka", AMQPURL: "amqp://guest:guest@127.0.0.1:5672/"},
		{Broker: "kafka", NATSURL: "nats://127.0.0.1:4222"},
		{Broker: "kafka", Kafka: []string{"no-port"}},
	} {
		if err := drill.Check(context.Background(), c); !errors.Is(err, idem.ErrInvalidOption) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v, want one line, an invalid option", c, err)
		}
	}
}

// TestDrillKafkaSeeds: with Config.Kafka the drill runs on that cluster
// (here one started by the test, as a real one would be), checked first;
// a cluster that does not answer is a configuration error.
func TestDrillKafkaSeeds(t *testing.T) {
	c, err := boxoffice.StartKafka()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := []string{"crash-before-ack", "concurrent-delivery"}
	rep, err := drill.Run(context.Background(), drill.Config{Broker: "kafka", Kafka: c.ListenAddrs(), Orders: 60, Workers: 4, Crash: 0.1,
		TempDir: t.TempDir(), Seed: 4, Scenarios: sc})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, len(sc))
	err = drill.Check(context.Background(), drill.Config{Broker: "kafka", Kafka: []string{"127.0.0.1:1"}})
	if !errors.Is(err, drill.ErrTarget) || !strings.Contains(err.Error(), "Kafka does not answer") {
		t.Fatalf("unreachable cluster: %v, want an ErrTarget", err)
	}
}
