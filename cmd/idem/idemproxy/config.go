package idemproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
)

// Route puts the Idempotency-Key contract on one upstream route.
type Route struct {
	// Method is the HTTP method ("POST"); empty matches every method.
	Method string
	// Path is an http.ServeMux path pattern: "/orders", "/accounts/{id}/charge",
	// or "/" for every path.
	Path string
	// Operation is the stable name that scopes the route's keys (with the
	// tenant), for example "orders.create". It is not derived from the
	// path, so renaming an upstream route does not silently start a fresh
	// key space. Empty defaults to Method + " " + Path (for a catch-all
	// route: the method and the request's path) with a warning.
	Operation string
	// Optional lets requests without an Idempotency-Key pass through to the
	// upstream without the key contract (a JWT tenant's token is still
	// verified); by default a POST or PATCH without one gets 400.
	Optional bool
	// Tenant says where the tenant that scopes the keys comes from. The
	// zero value is one shared tenant (with a warning).
	Tenant TenantSource
	// ExcludeFields, ExcludeQuery and FingerprintHeaders tune the request
	// fingerprint (see idemhttp.Config).
	ExcludeFields      []string
	ExcludeQuery       []string
	FingerprintHeaders []string
	// Retention is how long a stored response answers for its key
	// (default 24h).
	Retention time.Duration
	// Lease bounds one upstream call (default 30s): the upstream request
	// is cancelled when it ends, and an in-progress key whose lease ended is
	// recovered by ExpiredPolicy.
	Lease time.Duration
	// ExpiredPolicy is idem.Retake ("re-execute", the default) or
	// idem.Hold.
	ExpiredPolicy idem.ExpiredLease
	// ReplayHeaders are the response headers stored and replayed (default
	// Content-Type and Location).
	ReplayHeaders []string
	// WaitForInFlight makes a duplicate that finds its key executing wait
	// up to this long and replay, instead of answering 409 at once.
	WaitForInFlight time.Duration
	// ExactPath matches the route's path only as written. By default the
	// route also takes the spellings of its path that an upstream may read
	// as the same route (see [Proxy.ServeHTTP]).
	ExactPath bool
}

// pattern is the route's http.ServeMux pattern.
func (r Route) pattern() string {
	if r.Method == "" {
		return r.Path
	}
	return r.Method + " " + r.Path
}

// TenantSource is where a route's tenant comes from: a request header, or
// a claim of a verified JWT. At most one of Header and JWT is set; neither
// means one shared tenant.
type TenantSource struct {
	// Header names a request header holding the tenant (e.g. X-Tenant-ID);
	// a keyed request without it answers 401. The header is not an
	// authentication: requests without a key are not checked.
	Header string
	// JWT verifies a bearer token and takes the tenant from one claim.
	JWT *JWTConfig
}

func (s TenantSource) isZero() bool { return s.Header == "" && s.JWT == nil }

// ParseRoute parses "METHOD /path" (or "/path" for every method) as given
// to --route, with an optional "=operation" suffix naming the stable
// operation: "POST /orders=orders.create". The word "exact" after the path
// sets ExactPath: "POST /orders exact=orders.create".
func ParseRoute(s string) (Route, error) {
	spec, op, _ := strings.Cut(strings.TrimSpace(s), "=")
	r := Route{Operation: strings.TrimSpace(op)}
	fields := strings.Fields(spec)
	if n := len(fields); n > 1 && fields[n-1] == "exact" {
		r.ExactPath, fields = true, fields[:n-1]
	}
	var method, path string
	switch len(fields) {
	case 1:
		path = fields[0]
	case 2:
		method, path = fields[0], fields[1]
	default:
		return r, checks.Optionf("route %q: want \"METHOD /path\" or \"METHOD /path exact\", e.g. \"POST /orders\"", s)
	}
	if method != "" && (method != strings.ToUpper(method) || strings.ContainsAny(method, "/ \t")) {
		return r, checks.Optionf("route %q: the method must be upper case, e.g. \"POST /orders\"", s)
	}
	if !strings.HasPrefix(path, "/") {
		return r, checks.Optionf("route %q: want \"METHOD /path\", e.g. \"POST /orders\"", s)
	}
	r.Method, r.Path = method, path
	return r, nil
}

// FileConfig is the configuration file of "idem proxy --config", in JSON
// or YAML (chosen by the extension .json, .yaml or .yml). Durations are
// strings such as "30s" or "24h".
//
//	upstream: http://127.0.0.1:9000      # optional; --upstream wins
//	tenant: {header: X-Tenant-ID}        # default of every route
//	max_body_bytes: 1048576
//	max_stored_body: 1048576
//	routes:
//	  - route: POST /orders
//	    operation: orders.create         # stable name of the key space
//	    key: required                    # or optional
//	    tenant:                          # overrides the default
//	      jwt: {claim: tenant, hs256_secret_env: ORDERS_JWT_SECRET}
//	    exclude_fields: [metadata.client_time]
//	    exclude_query: [_]
//	    fingerprint_headers: [X-Api-Version]
//	    retention: 24h
//	    lease: 30s
//	    expired_lease: hold              # or re-execute (default)
//	    replay_headers: [Content-Type, Location]
//	    wait_for_in_flight: 5s
//	    exact_path: false                # true: no path variants (see Proxy.ServeHTTP)
type FileConfig struct {
	Upstream      string      `json:"upstream" yaml:"upstream"`
	Tenant        *FileTenant `json:"tenant" yaml:"tenant"`
	MaxBodyBytes  int64       `json:"max_body_bytes" yaml:"max_body_bytes"`
	MaxStoredBody int         `json:"max_stored_body" yaml:"max_stored_body"`
	Routes        []FileRoute `json:"routes" yaml:"routes"`
}

// FileRoute is one route of a FileConfig.
type FileRoute struct {
	Route              string      `json:"route" yaml:"route"`
	Operation          string      `json:"operation" yaml:"operation"`
	Key                string      `json:"key" yaml:"key"`
	Tenant             *FileTenant `json:"tenant" yaml:"tenant"`
	ExcludeFields      []string    `json:"exclude_fields" yaml:"exclude_fields"`
	ExcludeQuery       []string    `json:"exclude_query" yaml:"exclude_query"`
	FingerprintHeaders []string    `json:"fingerprint_headers" yaml:"fingerprint_headers"`
	Retention          string      `json:"retention" yaml:"retention"`
	Lease              string      `json:"lease" yaml:"lease"`
	ExpiredLease       string      `json:"expired_lease" yaml:"expired_lease"`
	ReplayHeaders      []string    `json:"replay_headers" yaml:"replay_headers"`
	WaitForInFlight    string      `json:"wait_for_in_flight" yaml:"wait_for_in_flight"`
	// ExactPath matches the route's path only as written (Route.ExactPath);
	// "POST /orders exact" in Route sets it too.
	ExactPath bool `json:"exact_path" yaml:"exact_path"`
}

// FileTenant is a tenant source in a FileConfig.
type FileTenant struct {
	Header string   `json:"header" yaml:"header"`
	JWT    *FileJWT `json:"jwt" yaml:"jwt"`
}

// FileJWT is a JWT tenant source in a FileConfig. Secrets are never
// written in the file: the HS256 secret comes from an environment
// variable or a file, public keys from a JWKS file (relative paths are
// relative to the configuration file).
type FileJWT struct {
	Header         string   `json:"header" yaml:"header"`
	Claim          string   `json:"claim" yaml:"claim"`
	HS256SecretEnv string   `json:"hs256_secret_env" yaml:"hs256_secret_env"`
	HS256Secret    string   `json:"hs256_secret_file" yaml:"hs256_secret_file"`
	JWKSFile       string   `json:"jwks_file" yaml:"jwks_file"`
	Issuer         string   `json:"issuer" yaml:"issuer"`
	Audience       string   `json:"audience" yaml:"audience"`
	Leeway         string   `json:"leeway" yaml:"leeway"`
	Algorithms     []string `json:"algorithms" yaml:"algorithms"`
}

// LoadConfig reads and checks a configuration file; getenv resolves
// hs256_secret_env (os.Getenv when nil). Unknown fields are errors, so a
// misspelt option never passes silently. Errors wrap idem.ErrInvalidOption.
func LoadConfig(path string, getenv func(string) string) (FileConfig, []Route, error) {
	var fc FileConfig
	if getenv == nil {
		getenv = os.Getenv
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, nil, checks.Optionf("config: %v", err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fc); err != nil {
			return fc, nil, checks.Optionf("config %s: %v", path, err)
		}
	case ".yaml", ".yml":
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
			return fc, nil, checks.Optionf("config %s: %v", path, err)
		}
	default:
		return fc, nil, checks.Optionf("config %s: want a .json, .yaml or .yml file", path)
	}
	dir := filepath.Dir(path)
	var def TenantSource
	if fc.Tenant != nil {
		if def, err = fc.Tenant.source(dir, getenv); err != nil {
			return fc, nil, checks.Optionf("config %s: tenant: %v", path, err)
		}
	}
	routes := make([]Route, 0, len(fc.Routes))
	for i, fr := range fc.Routes {
		r, err := fr.route(dir, def, getenv)
		if err != nil {
			return fc, nil, checks.Optionf("config %s: routes[%d]: %v", path, i, err)
		}
		routes = append(routes, r)
	}
	return fc, routes, nil
}

func (fr FileRoute) route(dir string, def TenantSource, getenv func(string) string) (Route, error) {
	r, err := ParseRoute(fr.Route)
	if err != nil {
		return r, err
	}
	if r.Operation != "" && fr.Operation != "" {
		return r, fmt.Errorf("route %q names its operation twice", fr.Route)
	}
	if fr.Operation != "" {
		r.Operation = fr.Operation
	}
	switch fr.Key {
	case "", "required":
	case "optional":
		r.Optional = true
	default:
		return r, fmt.Errorf("key %q: want required or optional", fr.Key)
	}
	r.Tenant = def
	if fr.Tenant != nil {
		if r.Tenant, err = fr.Tenant.source(dir, getenv); err != nil {
			return r, fmt.Errorf("tenant: %w", err)
		}
	}
	r.ExactPath = r.ExactPath || fr.ExactPath
	r.ExcludeFields, r.ExcludeQuery, r.FingerprintHeaders = fr.ExcludeFields, fr.ExcludeQuery, fr.FingerprintHeaders
	r.ReplayHeaders = fr.ReplayHeaders
	for _, d := range []struct {
		name string
		s    string
		out  *time.Duration
	}{{"retention", fr.Retention, &r.Retention}, {"lease", fr.Lease, &r.Lease}, {"wait_for_in_flight", fr.WaitForInFlight, &r.WaitForInFlight}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil || v <= 0 {
			return r, fmt.Errorf("%s %q: want a positive duration such as 30s", d.name, d.s)
		}
		*d.out = v
	}
	if r.ExpiredPolicy, err = ParsePolicy(fr.ExpiredLease); err != nil {
		return r, err
	}
	return r, nil
}

// ParsePolicy parses an expired-lease policy: "re-execute" (also "") or
// "hold".
func ParsePolicy(s string) (idem.ExpiredLease, error) {
	switch s {
	case "", "re-execute", "reexecute":
		return idem.Retake, nil
	case "hold":
		return idem.Hold, nil
	}
	return 0, checks.Optionf("expired_lease %q: want re-execute or hold", s)
}

// PolicyName is the proxy's name of an expired-lease policy, as
// [ParsePolicy] reads it and the proxy's answers and messages print it:
// "re-execute" for idem.Retake, "hold" for idem.Hold.
func PolicyName(p idem.ExpiredLease) string {
	if p == idem.Retake {
		return "re-execute"
	}
	return p.String()
}

func (ft FileTenant) source(dir string, getenv func(string) string) (TenantSource, error) {
	if ft.Header != "" && ft.JWT != nil {
		return TenantSource{}, errors.New("give header or jwt, not both")
	}
	if ft.JWT == nil {
		return TenantSource{Header: ft.Header}, nil
	}
	j := ft.JWT
	cfg := &JWTConfig{Header: j.Header, Claim: j.Claim, Issuer: j.Issuer, Audience: j.Audience, Algorithms: j.Algorithms}
	if j.Leeway != "" {
		d, err := time.ParseDuration(j.Leeway)
		if err != nil || d < 0 {
			return TenantSource{}, fmt.Errorf("jwt leeway %q: want a duration such as 30s", j.Leeway)
		}
		cfg.Leeway = d
	}
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	switch {
	case j.HS256SecretEnv != "":
		v := getenv(j.HS256SecretEnv)
		if v == "" {
			return TenantSource{}, fmt.Errorf("jwt hs256_secret_env: %s is empty or unset", j.HS256SecretEnv)
		}
		cfg.HS256Secret = []byte(v)
	case j.HS256Secret != "":
		b, err := os.ReadFile(rel(j.HS256Secret))
		if err != nil {
			return TenantSource{}, fmt.Errorf("jwt hs256_secret_file: %w", err)
		}
		cfg.HS256Secret = bytes.TrimRight(b, "\r\n")
	}
	if j.JWKSFile != "" {
		b, err := os.ReadFile(rel(j.JWKSFile))
		if err != nil {
			return TenantSource{}, fmt.Errorf("jwt jwks_file: %w", err)
		}
		cfg.JWKS = b
	}
	if _, err := cfg.verifier(); err != nil {
		return TenantSource{}, err
	}
	return TenantSource{JWT: cfg}, nil
}
