package idemproxy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/internal/testdb"
)

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func sign(t *testing.T, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The tenant comes from a verified JWT claim (HS256 secret, or RS256 and
// ES256 keys from a JWKS file): two tenants with one key are independent,
// and a token that does not verify never reaches the upstream.
func TestProxyJWTTenant(t *testing.T) {
	up := nodeUpstream(t, 0)
	dir := t.TempDir()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pad := func(b []byte) []byte { return append(make([]byte, 32-len(b)), b...) }
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "r1", "use": "sig", "n": b64u(rsaKey.N.Bytes()), "e": b64u(big.NewInt(int64(rsaKey.E)).Bytes())},
		{"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64u(pad(ecKey.X.Bytes())), "y": b64u(pad(ecKey.Y.Bytes()))},
	}})
	if err := os.WriteFile(filepath.Join(dir, "jwks.json"), jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	secret := "0123456789abcdef0123456789abcdef-secret"
	cfgFile := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(cfgFile, []byte(`
routes:
  - route: POST /orders
    operation: orders.create
    tenant:
      jwt: {claim: tenant, hs256_secret_env: TEST_JWT_SECRET, issuer: idp}
  - route: POST /orders/asym
    operation: orders.create.asym
    tenant:
      jwt: {claim: tenant, jwks_file: jwks.json}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, routes, err := idemproxy.LoadConfig(cfgFile, func(k string) string {
		if k == "TEST_JWT_SECRET" {
			return secret
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, testdb.SQLite(t), up.URL, idemproxy.Config{Routes: routes})
	exp := time.Now().Add(time.Hour).Unix()
	claims := func(tenant string) jwt.MapClaims {
		return jwt.MapClaims{"tenant": tenant, "iss": "idp", "exp": exp}
	}
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	acme := send(t, p.URL, call{key: "k", body: `{}`, headers: bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), "", claims("acme")))})
	wantStatus(t, acme, 201)
	globex := send(t, p.URL, call{key: "k", body: `{}`, headers: bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), "", claims("globex")))})
	wantStatus(t, globex, 201)
	if globex.body == acme.body || globex.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("another tenant's token got the first tenant's stored answer")
	}
	again := send(t, p.URL, call{key: "k", body: `{}`, headers: bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), "", claims("acme")))})
	if again.body != acme.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the same tenant's retry was not replayed")
	}
	for name, h := range map[string]map[string]string{
		"no token":     nil,
		"wrong secret": bearer(sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-0123456789"), "", claims("acme"))),
		"wrong issuer": bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), "", jwt.MapClaims{"tenant": "acme", "iss": "evil", "exp": exp})),
		"expired":      bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), "", jwt.MapClaims{"tenant": "acme", "iss": "idp", "exp": time.Now().Add(-time.Hour).Unix()})),
		"no claim":     bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), "", jwt.MapClaims{"iss": "idp", "exp": exp})),
		"alg none":     bearer(sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims("acme"))),
	} {
		a := send(t, p.URL, call{key: "k2", body: `{}`, headers: h})
		if a.status != 401 {
			t.Errorf("%s: status %d, want 401", name, a.status)
		}
	}
	// RS256 and ES256 through the JWKS; an HS256 token is refused there.
	wantStatus(t, send(t, p.URL, call{path: "/orders/asym", key: "k", body: `{}`, headers: bearer(sign(t, jwt.SigningMethodRS256, rsaKey, "r1", jwt.MapClaims{"tenant": "acme", "exp": exp}))}), 404)
	wantStatus(t, send(t, p.URL, call{path: "/orders/asym", key: "k2", body: `{}`, headers: bearer(sign(t, jwt.SigningMethodES256, ecKey, "e1", jwt.MapClaims{"tenant": "acme", "exp": exp}))}), 404)
	wantStatus(t, send(t, p.URL, call{path: "/orders/asym", key: "k3", body: `{}`, headers: bearer(sign(t, jwt.SigningMethodES256, ecKey, "r1", jwt.MapClaims{"tenant": "acme", "exp": exp}))}), 401)
	wantStatus(t, send(t, p.URL, call{path: "/orders/asym", key: "k4", body: `{}`, headers: bearer(sign(t, jwt.SigningMethodHS256, []byte(secret), "", jwt.MapClaims{"tenant": "acme", "exp": exp}))}), 401)
	if c := executions(t, up); c.Executions != 2 {
		t.Fatalf("%d executions of POST /orders, want 2 (one per tenant)", c.Executions)
	}
}

// Numeric tenant claims are compared exactly: 9007199254740993 and
// 9007199254740992 round to one float64, and would share a key space, the
// second tenant replaying the first's stored response. A number that is
// not an integer names no tenant: 401 problem+json, never the upstream.
func TestProxyJWTNumericTenantsAreExact(t *testing.T) {
	up := nodeUpstream(t, 0)
	secret := "0123456789abcdef0123456789abcdef-secret"
	cfgFile := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfgFile, []byte(`
routes:
  - route: POST /orders
    operation: orders.create
    tenant:
      jwt: {hs256_secret_env: TEST_JWT_SECRET}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, routes, err := idemproxy.LoadConfig(cfgFile, func(k string) string {
		if k == "TEST_JWT_SECRET" {
			return secret
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, testdb.SQLite(t), up.URL, idemproxy.Config{Routes: routes})
	exp := time.Now().Add(time.Hour).Unix()
	bearer := func(sub json.Number) map[string]string {
		return map[string]string{"Authorization": "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(secret), "", jwt.MapClaims{"sub": sub, "exp": exp})}
	}

	first := send(t, p.URL, call{key: "k", body: `{}`, headers: bearer("9007199254740993")})
	wantStatus(t, first, 201)
	second := send(t, p.URL, call{key: "k", body: `{}`, headers: bearer("9007199254740992")})
	wantStatus(t, second, 201)
	if second.header.Get("Idempotent-Replayed") != "" || second.body == first.body {
		t.Fatal("tenant 9007199254740992 got the stored response of tenant 9007199254740993")
	}
	again := send(t, p.URL, call{key: "k", body: `{}`, headers: bearer("9007199254740993")})
	if again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the first tenant's retry was not replayed")
	}
	// 1e3 is the integer 1000, written as before.
	wantStatus(t, send(t, p.URL, call{key: "k", body: `{}`, headers: bearer("1e3")}), 201)
	if r := send(t, p.URL, call{key: "k", body: `{}`, headers: bearer("1000")}); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("tenant 1000 did not replay the response stored for the claim 1e3")
	}

	bad := send(t, p.URL, call{key: "k", body: `{}`, headers: bearer("1.5")})
	wantStatus(t, bad, 401)
	if ct := bad.header.Get("Content-Type"); ct != "application/problem+json" || !strings.Contains(bad.body, `\"sub\" claim`) {
		t.Fatalf("non-integer tenant: %s %s, want problem+json naming the claim", ct, bad.body)
	}
	if c := executions(t, up); c.Executions != 3 {
		t.Fatalf("%d executions, want 3 (one per tenant)", c.Executions)
	}
}
