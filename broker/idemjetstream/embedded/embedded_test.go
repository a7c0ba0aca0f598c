package embedded_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	idemjs "github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
)

// TestCredentialsRequired: a local process that knows only the port (a
// plain nats.Connect, a wrong password, another user) is refused; the
// ClientURL idem's own clients use works, also after a restart.
func TestCredentialsRequired(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	addr := srv.Address()
	if strings.Contains(addr, "@") {
		t.Fatalf("Address %q carries credentials", addr)
	}
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	if u.User.Username() != embedded.User || len(pw) < 20 {
		t.Fatalf("ClientURL user %q, password of %d characters", u.User.Username(), len(pw))
	}
	host := strings.TrimPrefix(addr, "nats://")
	refused := map[string]string{
		"no credentials": addr,
		"wrong password": "nats://" + embedded.User + ":" + strings.Repeat("A", len(pw)) + "@" + host,
		"other user":     "nats://someone:" + pw + "@" + host,
		"token":          "nats://" + pw + "@" + host,
	}
	for name, raw := range refused {
		nc, err := nats.Connect(raw, nats.NoReconnect(), nats.Timeout(5*time.Second))
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
			continue
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("%s: %v, want an authorization error", name, err)
		}
	}

	publish := func() {
		t.Helper()
		nc, err := nats.Connect(srv.ClientURL(), nats.NoReconnect())
		if err != nil {
			t.Fatalf("ClientURL refused: %v", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"order-events"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "order-events", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	publish()
	before := srv.ClientURL()
	srv.Stop()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if srv.ClientURL() != before {
		t.Fatalf("credentials changed across a restart")
	}
	publish()
	if nc, err := nats.Connect(srv.Address(), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("connected without credentials after a restart")
	}
}

// TestFreshPasswordPerServer: two servers never share a password.
func TestFreshPasswordPerServer(t *testing.T) {
	t.Parallel()
	a, err := embedded.New(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := embedded.New(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := mustParse(t, a.ClientURL()).User.Password()
	pb, _ := mustParse(t, b.ClientURL()).User.Password()
	if pa == pb {
		t.Fatal("two servers got the same password")
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestDialErrorHidesPassword: when idem's client cannot connect, the error
// names the server without the password ClientURL carries.
func TestDialErrorHidesPassword(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	clientURL := srv.ClientURL()
	srv.Shutdown()
	pw, _ := mustParse(t, clientURL).User.Password()
	_, _, err = idemjs.Dial(clientURL)
	if err == nil {
		t.Fatal("connected to a stopped server")
	}
	if strings.Contains(err.Error(), pw) {
		t.Fatalf("the error shows the password: %v", err)
	}
}
