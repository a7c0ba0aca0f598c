// Package embedded runs an in-process NATS server with JetStream
// (github.com/nats-io/nats-server/v2/server): file storage in a data
// directory, listening on the loopback interface only. It is idem's zero
// set-up broker: `idem demo` and `idem drill` use it when no --nats URL is
// given.
//
// Because the store is on disk, streams, messages and consumer state
// survive a Shutdown followed by Start (on the same port), which the drills
// use to simulate a broker outage.
package embedded

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
)

// Config configures a [Server].
type Config struct {
	// DataDir is the JetStream store directory. Defaults to a new temporary
	// directory, removed by Shutdown.
	DataDir string
	// Host is the listen address; it must be a loopback address. Defaults
	// to 127.0.0.1.
	Host string
	// Port is the client port. Defaults to 0: a random free port, chosen at
	// the first Start and kept for later Starts.
	Port int
	// ServerName names the server. Defaults to "idem-embedded".
	ServerName string
	// MaxStore bounds the file store in bytes. Defaults to 0: the server's
	// default (a share of the disk).
	MaxStore int64
	// MaxMemory bounds memory storage in bytes. Defaults to 0: the server's
	// default.
	MaxMemory int64
	// StartTimeout bounds the wait for the server to accept connections.
	// Defaults to 10s.
	StartTimeout time.Duration
	// Logger receives the server's logs (notices at Info, debug at Debug).
	// Defaults to discard.
	Logger *slog.Logger
}

// Server is an embedded JetStream server. Start and Shutdown may be called
// repeatedly (a restart keeps the data directory and the port). Safe for
// concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	tempDir bool

	mu  sync.Mutex // protects srv and cfg.Port
	srv *server.Server
}

// New validates cfg and returns a stopped server; call Start.
func New(cfg Config) (*Server, error) {
	cfg.Host = cmp.Or(cfg.Host, "127.0.0.1")
	cfg.ServerName = cmp.Or(cfg.ServerName, "idem-embedded")
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, 10*time.Second)
	if !isLoopback(cfg.Host) {
		return nil, idem.InvalidOptionf("embedded: host %q is not a loopback address", cfg.Host)
	}
	if cfg.Port < 0 || cfg.Port > 65535 || cfg.MaxStore < 0 || cfg.MaxMemory < 0 || cfg.StartTimeout < 0 {
		return nil, idem.InvalidOptionf("embedded: bad port, limits or timeout")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log.With("component", "broker/jetstream/embedded")}
	if cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "idem-nats-*")
		if err != nil {
			return nil, fmt.Errorf("embedded: data dir: %w", err)
		}
		s.cfg.DataDir, s.tempDir = dir, true
	}
	return s, nil
}

// Start is New followed by [Server.Start].
func Start(cfg Config) (*Server, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		s.Shutdown()
		return nil, err
	}
	return s, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start starts the server and waits until it accepts connections. It is a
// no-op when the server is running. After a Shutdown it restarts on the
// same port with the same data directory.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil && s.srv.Running() {
		return nil
	}
	port := s.cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:         s.cfg.ServerName,
		Host:               s.cfg.Host,
		Port:               port,
		JetStream:          true,
		StoreDir:           s.cfg.DataDir,
		JetStreamMaxStore:  s.cfg.MaxStore,
		JetStreamMaxMemory: s.cfg.MaxMemory,
		NoSigs:             true,
		NoLog:              s.cfg.Logger == nil,
		HTTPPort:           0,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if s.cfg.Logger != nil {
		srv.SetLoggerV2(slogAdapter{s.log}, true, false, false)
	}
	srv.Start()
	if !srv.ReadyForConnections(s.cfg.StartTimeout) {
		srv.Shutdown()
		return fmt.Errorf("embedded: server not ready within %v: %w", s.cfg.StartTimeout, broker.ErrUnavailable)
	}
	if s.cfg.Port == 0 {
		if addr, ok := srv.Addr().(*net.TCPAddr); ok {
			s.cfg.Port = addr.Port
		}
	}
	s.srv = srv
	s.log.Info("embedded JetStream started", "url", srv.ClientURL(), "data_dir", s.cfg.DataDir)
	return nil
}

// ClientURL returns the URL clients connect to (nats://127.0.0.1:port).
// It stays the same across restarts.
func (s *Server) ClientURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("nats://%s", net.JoinHostPort(s.cfg.Host, fmt.Sprint(s.cfg.Port)))
}

// DataDir returns the JetStream store directory.
func (s *Server) DataDir() string { return s.cfg.DataDir }

// Running reports whether the server is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil && s.srv.Running()
}

// Stop stops the server and waits for it to finish, keeping the data
// directory so a later Start resumes with every stream and consumer. It
// is a no-op when the server is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
	s.log.Info("embedded JetStream stopped")
}

// Shutdown stops the server and, if New created a temporary data
// directory, removes it. Use Stop for a restartable stop.
func (s *Server) Shutdown() {
	s.Stop()
	if s.tempDir {
		_ = os.RemoveAll(s.cfg.DataDir)
	}
}

// Close is Shutdown returning nil, for io.Closer.
func (s *Server) Close() error {
	s.Shutdown()
	return nil
}

// slogAdapter routes the server's logger to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(f string, v ...any) { a.l.Info(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Tracef(f string, v ...any) {
	a.l.Log(context.Background(), slog.LevelDebug-4, fmt.Sprintf(f, v...))
}
