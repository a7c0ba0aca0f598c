package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// runKeys implements "idem keys show --tenant T --operation OP KEY [--db URL]
// [--json]": it prints one stored HTTP Idempotency-Key record (state,
// fingerprint, stored response, lease and expiry). Flags may come before or
// after the key. A missing record exits 1.
func runKeys(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "keys", "show --tenant T --operation OP KEY [--db URL] [--json]")
	dbURL := fs.String("db", "", "database URL (postgres://…, mysql://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	tenant := fs.String("tenant", "", "tenant that scopes the key (default: the shared tenant \"\")")
	operation := fs.String("operation", "", `operation that scopes the key, e.g. "POST /orders" (required)`)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pos := fs.Args()
	if len(pos) == 0 {
		return fmt.Errorf("%w: missing action (show; run 'idem keys -h')", errUsage)
	}
	if pos[0] != "show" {
		return fmt.Errorf("%w: unknown action %q (want show)", errUsage, pos[0])
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: show needs exactly one KEY", errUsage)
	}
	if *operation == "" {
		return fmt.Errorf("%w: --operation is required (e.g. --operation \"POST /orders\")", errUsage)
	}
	key, err := idemhttp.ParseKeyValue(pos[1])
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if env.CheckOnly {
		return nil
	}
	d, err := openSQL(ctx, databaseURL(env, *dbURL), mustExist)
	if err != nil {
		return err
	}
	defer d.Close()
	rec, err := idemhttp.Lookup(ctx, d, *tenant, *operation, key)
	if errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("no record for tenant %q, operation %q, key %q", *tenant, *operation, key)
	}
	if err != nil {
		return fmt.Errorf("%w (has \"idem migrate up\" been run?)", err)
	}
	now := time.Now()
	if *asJSON {
		return printJSON(env, keysJSON(rec, now))
	}
	return keysPrint(env, rec, now)
}

type keysRecord struct {
	Tenant       string              `json:"tenant"`
	Operation    string              `json:"operation"`
	Key          string              `json:"key"`
	State        string              `json:"state"`
	Expired      bool                `json:"expired"`
	Fingerprint  string              `json:"fingerprint"`
	Token        int64               `json:"token"`
	Status       int                 `json:"status,omitempty"`
	Headers      map[string][]string `json:"headers,omitempty"`
	Body         *string             `json:"body,omitempty"`
	BodyBase64   []byte              `json:"body_base64,omitempty"`
	BodyOmitted  bool                `json:"body_omitted"`
	ResourceType string              `json:"resource_type,omitempty"`
	ResourceID   string              `json:"resource_id,omitempty"`
	CreatedAt    time.Time           `json:"created_at"`
	LockedUntil  *time.Time          `json:"locked_until,omitempty"`
	CompletedAt  *time.Time          `json:"completed_at,omitempty"`
	ExpiresAt    time.Time           `json:"expires_at"`
}

func keysJSON(r *idemhttp.Record, now time.Time) keysRecord {
	out := keysRecord{
		Tenant: r.Tenant, Operation: r.Operation, Key: r.Key, State: string(r.State), Expired: r.Expired(now),
		Fingerprint: r.Fingerprint.String(), Token: r.Token, Status: r.Status, Headers: r.Header,
		BodyOmitted: r.BodyOmitted, ResourceType: r.ResourceType, ResourceID: r.ResourceID,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
	}
	if len(r.Body) > 0 {
		if utf8.Valid(r.Body) {
			s := string(r.Body)
			out.Body = &s
		} else {
			out.BodyBase64 = r.Body
		}
	}
	if !r.LockedUntil.IsZero() {
		out.LockedUntil = &r.LockedUntil
	}
	if !r.CompletedAt.IsZero() {
		out.CompletedAt = &r.CompletedAt
	}
	return out
}

func keysPrint(env *Env, r *idemhttp.Record, now time.Time) error {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format(time.RFC3339Nano)
	}
	tw := newTable(env)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, termSafe(v)) }
	row("tenant", fmt.Sprintf("%q", r.Tenant))
	row("operation", r.Operation)
	row("key", r.Key)
	state := string(r.State)
	if r.Expired(now) {
		state += " (expired: treated as absent)"
	}
	row("state", state)
	row("fingerprint", r.Fingerprint.String())
	row("token", fmt.Sprint(r.Token))
	if r.State == idemhttp.StateCompleted {
		row("status", fmt.Sprint(r.Status))
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			row("header", k+": "+strings.Join(r.Header[k], ", "))
		}
		switch {
		case r.BodyOmitted:
			row("body", "(omitted: larger than the stored-body cap)")
		case !utf8.Valid(r.Body):
			row("body", fmt.Sprintf("(%d bytes, binary)", len(r.Body)))
		default:
			b := string(r.Body)
			if len(b) > 2048 {
				n := 2048
				for n > 0 && !utf8.RuneStart(b[n]) {
					n--
				}
				b = b[:n] + fmt.Sprintf("… (%d bytes)", len(r.Body))
			}
			row("body", b) // row escapes newlines and other controls
		}
	}
	if r.ResourceType != "" || r.ResourceID != "" {
		row("resource", strings.TrimSpace(r.ResourceType+" "+r.ResourceID))
	}
	row("created_at", ts(r.CreatedAt))
	if !r.LockedUntil.IsZero() {
		row("locked_until", ts(r.LockedUntil))
	}
	row("completed_at", ts(r.CompletedAt))
	row("expires_at", ts(r.ExpiresAt))
	return tw.Flush()
}
