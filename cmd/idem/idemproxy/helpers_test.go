package idemproxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/idemproxy"
	upstreamnode "github.com/idemkit/idem/examples/upstream-node"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/store"
)

func nodeUpstream(t *testing.T, port int) *upstreamnode.Upstream {
	return upstreamnode.StartTest(t, port)
}

func freePort(t *testing.T) int { return upstreamnode.FreePort(t) }

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// running is one proxy served on a loopback port (HTTP/1.1 and h2c).
type running struct {
	URL   string
	Proxy *idemproxy.Proxy
	srv   *http.Server
}

func startProxy[TTx any](t *testing.T, d store.Driver[TTx], upstream string, cfg idemproxy.Config) *running {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = u
	p, err := idemproxy.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserver.New("", p)
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	rp := &running{URL: "http://" + ln.Addr().String(), Proxy: p, srv: srv}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = p.Close(ctx)
	})
	return rp
}

// call is one request to a proxy.
type call struct {
	path    string
	key     string // "" = none
	tenant  string
	body    string
	headers map[string]string
}

type answer struct {
	status int
	header http.Header
	body   string
}

var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func send(t *testing.T, base string, c call) answer {
	t.Helper()
	a, err := sendErr(base, c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func sendErr(base string, c call) (answer, error) {
	if c.path == "" {
		c.path = "/orders"
	}
	req, err := http.NewRequest(http.MethodPost, base+c.path, strings.NewReader(c.body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Idempotency-Key", `"`+c.key+`"`)
	}
	if c.tenant != "" {
		req.Header.Set("X-Tenant-ID", c.tenant)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func wantStatus(t *testing.T, a answer, status int) {
	t.Helper()
	if a.status != status {
		body := a.body
		if len(body) > 400 {
			body = body[:400] + "…"
		}
		t.Fatalf("status %d, want %d; body %s", a.status, status, body)
	}
}

func executions(t *testing.T, u *upstreamnode.Upstream) upstreamnode.Counts {
	t.Helper()
	c, err := u.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func itoa(i int) string { return strconv.Itoa(i) }
