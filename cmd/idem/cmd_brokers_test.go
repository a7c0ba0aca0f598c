package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// cmdRun runs "idem args…" in-process with env as the environment and
// returns its exit status, stdout and stderr.
func cmdRun(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }}, args)
	return code, stdout.String(), stderr.String()
}

// TestBrokerFlagErrors: an unknown --broker, a broker's address given for
// another broker, RabbitMQ without --amqp, a malformed --kafka or --amqp
// are usage errors of drill, demo and worker: exit 2, one line on stderr,
// nothing on stdout, no URL password shown.
func TestBrokerFlagErrors(t *testing.T) {
	t.Parallel()
	const secret = "hunter4-broker-secret"
	amqpURL := "amqp://guest:" + secret + "@127.0.0.1:1/"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown broker", []string{"--broker", "pulsar"}, "pulsar"},
		{"rabbitmq without --amqp", []string{"--broker", "rabbitmq"}, "--amqp"},
		{"--kafka with nats", []string{"--broker", "nats", "--kafka", "127.0.0.1:9092"}, "--kafka is for --broker kafka"},
		{"--kafka by default", []string{"--kafka", "127.0.0.1:9092"}, "--kafka is for --broker kafka"},
		{"--amqp with kafka", []string{"--broker", "kafka", "--amqp", amqpURL}, "--amqp is for --broker rabbitmq"},
		{"--nats with rabbitmq", []string{"--broker", "rabbitmq", "--amqp", amqpURL, "--nats", "nats://127.0.0.1:4222"}, "--nats is for --broker nats"},
		{"--kafka without port", []string{"--broker", "kafka", "--kafka", "localhost"}, "host:port"},
		{"--amqp not amqp", []string{"--broker", "rabbitmq", "--amqp", "http://guest:" + secret + "@127.0.0.1/"}, "amqp://"},
	}
	for _, cmd := range []string{"drill", "demo", "worker"} {
		for _, c := range cases {
			t.Run(cmd+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				args := append([]string{cmd}, c.args...)
				if cmd == "worker" {
					args = append(args, "--role", "relay", "--db", "sqlite://"+t.TempDir()+"/x.db")
				}
				if cmd == "demo" {
					args = append(args, "--addr", "127.0.0.1:0", "--data", t.TempDir())
				}
				code, stdout, stderr := cmdRun(t, nil, args...)
				if code != 2 {
					t.Errorf("exit %d, want 2 (stderr %q)", code, stderr)
				}
				if stdout != "" {
					t.Errorf("stdout %q, want nothing", stdout)
				}
				lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
				if len(lines) != 1 || !strings.HasPrefix(lines[0], "idem "+cmd+": ") || !strings.Contains(lines[0], c.want) {
					t.Errorf("stderr %q: want one line \"idem %s: …%s…\"", stderr, cmd, c.want)
				}
				if strings.Contains(stderr, secret) {
					t.Errorf("stderr shows the password: %q", stderr)
				}
			})
		}
	}
}

// TestWorkerNeedsSharedBroker: a worker joins servers other processes
// share, so --broker kafka needs --kafka (or IDEM_KAFKA_BROKERS) and the
// RabbitMQ URL may come from IDEM_AMQP_URL.
func TestWorkerNeedsSharedBroker(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + t.TempDir() + "/x.db"
	code, _, stderr := cmdRun(t, nil, "worker", "--broker", "kafka", "--role", "relay", "--db", db)
	if code != 2 || !strings.Contains(stderr, "--kafka") {
		t.Errorf("kafka without seeds: exit %d %q", code, stderr)
	}
	code, _, stderr = cmdRun(t, map[string]string{"IDEM_KAFKA_BROKERS": "no-port"}, "worker", "--broker", "kafka", "--role", "relay", "--db", db)
	if code != 2 || !strings.Contains(stderr, "host:port") {
		t.Errorf("IDEM_KAFKA_BROKERS without port: exit %d %q", code, stderr)
	}
	code, _, stderr = cmdRun(t, map[string]string{"IDEM_AMQP_URL": "http://x/"}, "worker", "--broker", "rabbitmq", "--role", "relay", "--db", db)
	if code != 2 || !strings.Contains(stderr, "amqp://") {
		t.Errorf("IDEM_AMQP_URL not amqp: exit %d %q", code, stderr)
	}
}

// TestDrillOnKafkaAndRabbitMQ: idem drill --broker kafka runs on its
// in-process cluster with zero set-up, --broker rabbitmq on the RabbitMQ of
// IDEM_TEST_AMQP_URL; the banner names the broker (no password).
func TestDrillOnKafkaAndRabbitMQ(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := drillCmd(t, "--broker", "kafka", "--scenario", "crash-before-ack", "--orders", "40", "--workers", "2")
	if code != 0 || !strings.Contains(stdout, "PASS: 1/1") || !strings.Contains(stdout, "broker:   Kafka, in-process cluster") {
		t.Fatalf("kafka: exit %d:\n%s\n%s", code, stdout, stderr)
	}
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	code, stdout, stderr = drillCmd(t, "--broker", "rabbitmq", "--amqp", url, "--scenario", "crash-before-ack", "--orders", "40", "--workers", "2")
	if code != 0 || !strings.Contains(stdout, "PASS: 1/1") || !strings.Contains(stdout, "broker:   RabbitMQ amqp://guest:xxxxx@") {
		t.Fatalf("rabbitmq: exit %d:\n%s\n%s", code, stdout, stderr)
	}
	// An unreachable RabbitMQ is a configuration error, before any scenario.
	code, stdout, stderr = drillCmd(t, "--broker", "rabbitmq", "--amqp", "amqp://guest:hunter5@127.0.0.1:1/", "--orders", "20")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "cannot connect to RabbitMQ") || strings.Contains(stderr, "hunter5") {
		t.Fatalf("unreachable rabbitmq: exit %d %q %q", code, stdout, stderr)
	}
}
