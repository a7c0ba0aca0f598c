// Package pgproxy is a test helper: a TCP proxy in front of PostgreSQL that
// counts round trips and records the protocol messages the client sends, so
// tests can assert how many times a code path waits for the server and that
// values travel as bound parameters, never inside SQL text.
//
// A round trip is counted each time the client sends after the server has
// answered with ReadyForQuery (or an authentication or COPY request, the
// other messages a client waits for) since the client last sent: a client
// burst split over several TCP segments is still one round trip.
package pgproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// Message is one frontend (client to server) protocol message.
type Message struct {
	// Type is the message type byte: 'Q' simple query, 'P' Parse, 'B'
	// Bind, 'E' Execute, 'D' Describe, 'S' Sync, 'C' Close, 'X'
	// Terminate… Zero for the untyped startup message.
	Type byte
	// Body is the message without its type and length.
	Body []byte
	// RoundTrip is the 1-based round trip, counted since the last Reset,
	// in which the message was sent.
	RoundTrip int
}

// SQL returns the query text of a 'Q' or 'P' message, or "".
func (m Message) SQL() string {
	b := m.Body
	switch m.Type {
	case 'Q':
	case 'P':
		// Parse: statement name, then the query, each NUL-terminated.
		i := indexNUL(b)
		if i < 0 {
			return ""
		}
		b = b[i+1:]
	default:
		return ""
	}
	if i := indexNUL(b); i >= 0 {
		return string(b[:i])
	}
	return ""
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// Proxy forwards connections to one PostgreSQL server.
type Proxy struct {
	ln     net.Listener
	target string

	mu         sync.Mutex
	roundTrips int
	sent       []Message
	conns      []net.Conn
	wg         sync.WaitGroup

	// Holding the server's replies (HoldRepliesAfter, Release).
	holdIf  func(Message) bool
	armed   bool // a message holdIf accepted was sent; the next Execute holds
	held    bool
	release chan struct{} // closed by Release and by close
}

// Start listens on a loopback port, forwarding to target (host:port), and
// stops when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgproxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL returns connString (a postgres:// URL) pointed at the proxy, with TLS
// off so the messages can be read.
func (p *Proxy) URL(t testing.TB, connString string) string {
	t.Helper()
	u, err := url.Parse(connString)
	if err != nil {
		t.Fatalf("pgproxy: %v", err)
	}
	u.Host = p.ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// Target returns the host:port of connString, for Start.
func Target(t testing.TB, connString string) string {
	t.Helper()
	u, err := url.Parse(connString)
	if err != nil {
		t.Fatalf("pgproxy: %v", err)
	}
	if u.Port() == "" {
		return u.Hostname() + ":5432"
	}
	return u.Host
}

// Pgx returns a migrated pgx driver whose idem tables and search_path live
// in a fresh schema (testdb.PostgresSchema), on a pool of one connection
// through a new proxy. The pool never pings a connection on acquire (a
// ping is a round trip of its own); configure may change the rest of its
// configuration. Everything closes when t ends.
func Pgx(t testing.TB, configure ...func(*pgxpool.Config)) (*pgxstore.Driver, *Proxy) {
	t.Helper()
	conn, schema := testdb.PostgresSchema(t)
	p := Start(t, Target(t, conn))
	cfg, err := pgxpool.ParseConfig(p.URL(t, conn))
	if err != nil {
		t.Fatalf("pgproxy: %v", err)
	}
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	for _, f := range configure {
		f(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgproxy: %v", err)
	}
	t.Cleanup(pool.Close)
	d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema}})
	if err != nil {
		t.Fatalf("pgproxy: %v", err)
	}
	testdb.MustMigrate(t, d)
	return d, p
}

// HoldRepliesAfter makes the proxy hold the server's replies, on every
// connection, from the first Execute the client sends after a message
// match accepts (a Parse of a statement, say) until Release: the server
// runs what it was sent, and the client sees none of its answers. A test
// uses it to act (cancel a context) after the server did something and
// before the client knows.
func (p *Proxy) HoldRepliesAfter(match func(Message) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdIf, p.armed = match, false
	if p.release == nil {
		p.release = make(chan struct{})
	}
}

// Holding reports whether replies are being held.
func (p *Proxy) Holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// Release forwards the replies held and stops holding.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdIf, p.armed, p.held = nil, false, false
	if p.release != nil {
		close(p.release)
		p.release = nil
	}
}

// waitRelease blocks while replies are held.
func (p *Proxy) waitRelease() {
	p.mu.Lock()
	held, ch := p.held, p.release
	p.mu.Unlock()
	if held && ch != nil {
		<-ch
	}
}

// Reset forgets the round trips and messages counted so far.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.roundTrips, p.sent = 0, nil
}

// RoundTrips returns the number of round trips since the last Reset, over
// all connections.
func (p *Proxy) RoundTrips() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.roundTrips
}

// Sent returns the frontend messages since the last Reset.
func (p *Proxy) Sent() []Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Message(nil), p.sent...)
}

func (p *Proxy) close() {
	p.Release()
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		st := &connState{answered: true}
		p.wg.Add(2)
		go p.pipe(c, s, st, true)
		go p.pipe(s, c, st, false)
	}
}

// connState is shared by the two directions of one connection.
type connState struct {
	answered bool // the server sent something the client waits for since the client last sent
}

// pipe copies from src to dst, parsing the messages on the way. Client to
// server: the first message is the untyped startup message.
func (p *Proxy) pipe(src, dst net.Conn, st *connState, fromClient bool) {
	defer p.wg.Done()
	defer dst.Close()
	var buf []byte
	untyped := fromClient
	chunk := make([]byte, 64<<10)
	for {
		n, err := src.Read(chunk)
		if n > 0 {
			buf = append(buf, chunk[:n]...)
			var msgs []Message
			msgs, buf, untyped = split(buf, untyped)
			p.mu.Lock()
			if fromClient {
				if st.answered {
					p.roundTrips++
					st.answered = false
				}
				for i := range msgs {
					msgs[i].RoundTrip = p.roundTrips
					switch {
					case p.holdIf == nil || p.held:
					case p.holdIf(msgs[i]):
						p.armed = true
					case p.armed && msgs[i].Type == 'E':
						p.held = true
					}
				}
				p.sent = append(p.sent, msgs...)
			} else {
				for _, m := range msgs {
					switch m.Type {
					case 'Z', 'R', 'G', 'H':
						st.answered = true
					}
				}
			}
			p.mu.Unlock()
			if !fromClient {
				p.waitRelease()
			}
			// Forward only after the state is updated: the other side can
			// only react to bytes it has received.
			if _, werr := dst.Write(chunk[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = src.Close()
			}
			return
		}
	}
}

// split cuts the complete messages off the front of buf.
func split(buf []byte, untyped bool) ([]Message, []byte, bool) {
	var out []Message
	for {
		if untyped {
			if len(buf) < 4 {
				return out, buf, untyped
			}
			n := int(binary.BigEndian.Uint32(buf))
			if n < 4 || len(buf) < n {
				return out, buf, untyped
			}
			out = append(out, Message{Body: append([]byte(nil), buf[4:n]...)})
			buf, untyped = buf[n:], false
			continue
		}
		if len(buf) < 5 {
			return out, buf, untyped
		}
		n := int(binary.BigEndian.Uint32(buf[1:]))
		if n < 4 || len(buf) < 1+n {
			return out, buf, untyped
		}
		out = append(out, Message{Type: buf[0], Body: append([]byte(nil), buf[5:1+n]...)})
		buf = buf[1+n:]
	}
}
