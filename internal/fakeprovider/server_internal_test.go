package fakeprovider

import (
	"testing"

	"github.com/idemkit/idem/internal/httpserver"
)

// TestServerTimeouts: the provider's server is built by httpserver.New, so
// a client trickling a request or never reading the answer is cut off.
func TestServerTimeouts(t *testing.T) {
	p := New(Config{})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	if srv.ReadHeaderTimeout != httpserver.ReadHeaderTimeout || srv.ReadTimeout != httpserver.ReadTimeout ||
		srv.WriteTimeout != httpserver.WriteTimeout || srv.IdleTimeout != httpserver.IdleTimeout {
		t.Fatalf("timeouts header=%v read=%v write=%v idle=%v, want httpserver's", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
}
