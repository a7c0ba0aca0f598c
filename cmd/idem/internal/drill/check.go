package drill

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store/pgxstore"
)

// ErrTarget reports a --db or --nats target the drill cannot use: an
// unparseable URL, a server that does not answer or refuses the
// credentials, a NATS server without JetStream. It also matches
// idem.ErrInvalidOption: it is a configuration error, found before any
// scenario runs.
var ErrTarget = errors.New("drill: unusable target")

// targetError is an ErrTarget with its one-line, credential-free message.
type targetError struct{ msg string }

func (e *targetError) Error() string { return e.msg }

func (e *targetError) Is(target error) bool {
	return target == ErrTarget || target == idem.ErrInvalidOption
}

// targetErrorf builds a targetError; reason (an error from a driver) is
// folded onto one line and stripped of the secrets of rawURL.
func targetErrorf(rawURL string, reason error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if reason != nil {
		msg += ": " + scrub(reason.Error(), rawURL)
	}
	return &targetError{msg: oneLine(msg)}
}

// checkTimeout bounds the reachability check of each target.
const checkTimeout = 10 * time.Second

// Check validates cfg as [Run] does and makes sure its targets can be used:
// the PostgreSQL server of DatabaseURL accepts a connection, the NATS
// server of NATSURL accepts one and has JetStream. Run calls it first; a
// caller may call it before printing anything about the run. Its errors
// (matching idem.ErrInvalidOption, and ErrTarget for the targets) are one
// line and never show a password or token of the URLs.
func Check(ctx context.Context, cfg Config) error {
	if err := CheckOptions(cfg); err != nil {
		return err
	}
	if cfg.DatabaseURL != "" {
		if err := checkDatabase(ctx, cfg.DatabaseURL); err != nil {
			return err
		}
	}
	return checkBroker(ctx, cfg)
}

// CheckOptions validates cfg's options and scenario names without
// reaching any server: the part of [Check] a command line alone decides.
func CheckOptions(cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	_, err := cfg.chosen()
	return err
}

func checkPostgres(ctx context.Context, raw string) error {
	shown := redact.URL(raw)
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	switch err := pgxstore.Ping(ctx, raw); {
	case err == nil:
		return nil
	case errors.Is(err, pgxstore.ErrBadURL):
		return targetErrorf(raw, nil, "drill: --db %s is not a valid PostgreSQL URL", shown)
	case errors.Is(err, pgxstore.ErrNoAnswer):
		return targetErrorf(raw, errors.New(strings.TrimPrefix(err.Error(), pgxstore.ErrNoAnswer.Error()+": ")), "drill: --db %s: PostgreSQL does not answer", shown)
	default:
		return targetErrorf(raw, err, "drill: --db %s: cannot connect to PostgreSQL", shown)
	}
}

func checkNATS(ctx context.Context, raw string) error {
	shown := redact.URL(raw)
	nc, err := nats.Connect(raw, nats.Name("idem drill"), nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		return targetErrorf(raw, err, "drill: --nats %s: cannot connect to NATS", shown)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return targetErrorf(raw, err, "drill: --nats %s: JetStream", shown)
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return targetErrorf(raw, err, "drill: --nats %s: JetStream is not available", shown)
	}
	return nil
}

// oneLine folds s onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// scrub replaces in s every secret of the URLs (what redact.URL masks in
// them: a password, a NATS token, password-like query values) by
// redact.Mask, for driver messages that might quote them.
func scrub(s string, urls ...string) string {
	for _, raw := range urls {
		for _, secret := range secretsOf(raw) {
			s = strings.ReplaceAll(s, secret, redact.Mask)
		}
	}
	return s
}

// secretsOf returns the parts of raw that redact.URL masks, by comparing
// raw with its redacted form. Comma-separated lists (NATS) are handled
// element by element.
func secretsOf(raw string) []string {
	if raw == "" {
		return nil
	}
	if strings.Contains(raw, ",") {
		var out []string
		for _, p := range strings.Split(raw, ",") {
			out = append(out, secretsOf(strings.TrimSpace(p))...)
		}
		return out
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	r, err := url.Parse(redact.URL(raw))
	if err != nil {
		return nil
	}
	var out []string
	add := func(s string) {
		if len(s) >= 3 && s != redact.Mask { // too short to replace safely
			out = append(out, s, url.QueryEscape(s), url.PathEscape(s))
		}
	}
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			add(p)
		}
		if r.User != nil && r.User.Username() != u.User.Username() {
			add(u.User.Username())
		}
	}
	q, rq := u.Query(), r.Query()
	for k, vs := range q {
		for i, v := range vs {
			if i < len(rq[k]) && rq[k][i] != v {
				add(v)
			}
		}
	}
	return out
}
