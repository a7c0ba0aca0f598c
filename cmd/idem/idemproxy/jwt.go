package idemproxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/problem"
)

// JWTConfig takes a route's tenant from a claim of a bearer token verified
// with an HS256 secret or with the RS256/ES256 public keys of a JWKS
// document. The token is verified first on every request the route
// matches, whatever its method and whether or not it carries an
// Idempotency-Key (also on a route whose key is optional): a request whose
// token is missing, malformed, badly signed, expired, not yet valid, for
// another issuer or audience, or without the claim answers 401
// problem+json (idemhttp.TypeUnauthorized, with WWW-Authenticate: Bearer)
// and never reaches the upstream.
type JWTConfig struct {
	// Header carries the token; defaults to Authorization ("Bearer TOKEN";
	// any other header holds the bare token).
	Header string
	// Claim names the claim holding the tenant; defaults to "sub". A
	// string claim is used as is, an integer in its exact decimal form
	// (1e3 is "1000"; integers above 2^53 keep every digit). A number that
	// is not an integer is refused like a missing claim.
	Claim string
	// HS256Secret verifies HS256 tokens.
	HS256Secret []byte
	// JWKS is a JSON Web Key Set ({"keys": [...]}) of RSA and P-256 EC
	// public keys, verifying RS256 and ES256 tokens; a key is chosen by the
	// token's "kid" (any key of the right type when the token has none).
	JWKS []byte
	// Issuer and Audience, when set, must match the iss and aud claims.
	Issuer, Audience string
	// Leeway tolerates clock skew on exp, nbf and iat. Defaults to 0.
	Leeway time.Duration
	// Algorithms restricts the accepted algorithms (default: HS256 with a
	// secret, RS256 and ES256 with a JWKS).
	Algorithms []string
}

type jwtVerifier struct {
	cfg    JWTConfig
	parser *jwt.Parser
	keys   map[string]crypto.PublicKey // by kid
	anon   []crypto.PublicKey          // keys without a kid
}

func (c *JWTConfig) verifier() (*jwtVerifier, error) {
	v := &jwtVerifier{cfg: *c, keys: map[string]crypto.PublicKey{}}
	if v.cfg.Header == "" {
		v.cfg.Header = "Authorization"
	}
	if v.cfg.Claim == "" {
		v.cfg.Claim = "sub"
	}
	var algs []string
	if len(c.HS256Secret) > 0 {
		if len(c.HS256Secret) < 32 {
			return nil, errors.New("jwt: the HS256 secret must be at least 32 bytes (RFC 7518 §3.2)")
		}
		algs = append(algs, "HS256")
	}
	if len(c.JWKS) > 0 {
		if err := v.loadJWKS(c.JWKS); err != nil {
			return nil, err
		}
		algs = append(algs, "RS256", "ES256")
	}
	if len(algs) == 0 {
		return nil, errors.New("jwt: give an HS256 secret or a JWKS file")
	}
	if len(c.Algorithms) > 0 {
		for _, a := range c.Algorithms {
			if !slices.Contains(algs, a) {
				return nil, fmt.Errorf("jwt: algorithm %q is not available (have %s)", a, strings.Join(algs, ", "))
			}
		}
		algs = c.Algorithms
	}
	// Numbers decode as json.Number, not float64: numeric tenants above
	// 2^53 would otherwise round onto their neighbours' and share their
	// stored responses.
	opts := []jwt.ParserOption{jwt.WithValidMethods(algs), jwt.WithLeeway(c.Leeway), jwt.WithExpirationRequired(), jwt.WithJSONNumber()}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

func (v *jwtVerifier) loadJWKS(b []byte) error {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return fmt.Errorf("jwt: JWKS: %w", err)
	}
	if len(set.Keys) == 0 {
		return errors.New("jwt: JWKS has no keys")
	}
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pub, err := k.public()
		if err != nil {
			return fmt.Errorf("jwt: JWKS key %d (kid %q): %w", i, k.Kid, err)
		}
		if k.Kid == "" {
			v.anon = append(v.anon, pub)
			continue
		}
		if _, dup := v.keys[k.Kid]; dup {
			return fmt.Errorf("jwt: JWKS has two keys with kid %q", k.Kid)
		}
		v.keys[k.Kid] = pub
	}
	return nil
}

func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func (k jwk) public() (crypto.PublicKey, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err1 != nil || err2 != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad RSA n or e")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if pub.N.BitLen() < 2048 {
			return nil, fmt.Errorf("RSA key of %d bits, want at least 2048", pub.N.BitLen())
		}
		return pub, nil
	case "EC":
		if k.Crv != "P-256" {
			return nil, fmt.Errorf("EC curve %q, want P-256 (ES256)", k.Crv)
		}
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("bad EC x or y")
		}
		raw := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
		if err != nil {
			return nil, fmt.Errorf("EC point: %w", err)
		}
		return pub, nil
	}
	return nil, fmt.Errorf("key type %q, want RSA or EC", k.Kty)
}

func (v *jwtVerifier) keyFor(t *jwt.Token) (any, error) {
	switch t.Method.Alg() {
	case "HS256":
		return v.cfg.HS256Secret, nil
	case "RS256", "ES256":
		want := func(k crypto.PublicKey) bool {
			switch k.(type) {
			case *rsa.PublicKey:
				return t.Method.Alg() == "RS256"
			case *ecdsa.PublicKey:
				return t.Method.Alg() == "ES256"
			}
			return false
		}
		if kid, ok := t.Header["kid"].(string); ok && kid != "" {
			if k, ok := v.keys[kid]; ok && want(k) {
				return k, nil
			}
			return nil, fmt.Errorf("no %s key with kid %q", t.Method.Alg(), kid)
		}
		var ks jwt.VerificationKeySet
		for _, k := range v.anon {
			if want(k) {
				ks.Keys = append(ks.Keys, k)
			}
		}
		for _, k := range v.keys {
			if want(k) {
				ks.Keys = append(ks.Keys, k)
			}
		}
		if len(ks.Keys) == 0 {
			return nil, fmt.Errorf("no %s key", t.Method.Alg())
		}
		return ks, nil
	}
	return nil, fmt.Errorf("algorithm %q not accepted", t.Method.Alg())
}

// tenant verifies the request's token and returns its tenant claim.
func (v *jwtVerifier) tenant(r *http.Request) (string, error) {
	raw := strings.TrimSpace(r.Header.Get(v.cfg.Header))
	if strings.EqualFold(v.cfg.Header, "Authorization") {
		scheme, tok, ok := strings.Cut(raw, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", errors.New("no bearer token")
		}
		raw = strings.TrimSpace(tok)
	}
	if raw == "" {
		return "", errors.New("no token")
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(raw, claims, v.keyFor); err != nil {
		return "", err
	}
	switch c := claims[v.cfg.Claim].(type) {
	case string:
		if c != "" {
			return c, nil
		}
	case json.Number:
		t, err := integerText(c)
		if err != nil {
			return "", fmt.Errorf("%w: %q is %s", errTenantClaim, v.cfg.Claim, err)
		}
		return t, nil
	}
	return "", fmt.Errorf("%w: token has no %q claim", errTenantClaim, v.cfg.Claim)
}

// errTenantClaim marks a verified token whose tenant claim is missing or
// unusable.
var errTenantClaim = errors.New("jwt: tenant claim")

// maxTenantExponent bounds the exponent of a numeric tenant written with
// one (1e3), so that converting it stays cheap.
const maxTenantExponent = 64

// integerText returns n, a JSON number, as the exact decimal form of the
// integer it is, or an error when it is not an integer.
func integerText(n json.Number) (string, error) {
	s := string(n)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+")); err != nil || e > maxTenantExponent || e < -maxTenantExponent {
			return "", fmt.Errorf("the number %s, whose exponent is beyond ±%d", s, maxTenantExponent)
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "", fmt.Errorf("the malformed number %s", s)
	}
	if !r.IsInt() {
		return "", fmt.Errorf("the number %s, not an integer", s)
	}
	return r.Num().String(), nil
}

type verifiedTenantKey struct{}

// require verifies the token of every request before h sees it: a
// request without a valid one answers 401 problem+json and goes no
// further. The verified tenant travels in the request's context
// (verifiedTenant), so a keyed request is not verified twice.
func (v *jwtVerifier) require(log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := v.tenant(r)
		if err != nil {
			log.DebugContext(r.Context(), "token rejected", "error", err, "method", r.Method, "path", r.URL.Path)
			detail := "this route needs a valid bearer token in the " + v.cfg.Header + " header"
			if errors.Is(err, errTenantClaim) {
				// The token verified: naming the claim it lacks tells its
				// holder nothing a forger could use.
				detail = fmt.Sprintf("this route needs a bearer token whose %q claim is a non-empty string or an integer", v.cfg.Claim)
			}
			w.Header().Set("WWW-Authenticate", "Bearer")
			problem.Write(w, http.StatusUnauthorized, &idemhttp.Problem{Type: idemhttp.TypeUnauthorized,
				Title: "Request is not authorised", Status: http.StatusUnauthorized,
				Detail: detail}, 0)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), verifiedTenantKey{}, tenant)))
	})
}

// verifiedTenant is the route's idemhttp.Config.Tenant: the tenant require
// verified (a request that did not pass require is verified here).
func (v *jwtVerifier) verifiedTenant(r *http.Request) (string, error) {
	if t, ok := r.Context().Value(verifiedTenantKey{}).(string); ok {
		return t, nil
	}
	return v.tenant(r)
}
