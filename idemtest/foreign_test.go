package idemtest_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEffectCallCompilesInAnotherModule: a module of another path
// (example.com/acme, the repository replaced in) writes its EffectCall with
// idemtest's public API only, and it compiles; the same call written on
// internal/fakeprovider does not, which shows the build would catch a
// Call that takes a type only this repository can name again. It runs the
// go command offline (GOPROXY=off, no workspace): the dependencies come
// from the module cache that built this test.
func TestEffectCallCompilesInAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the build of a module of another path (it runs the go command)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := goDirective(t, filepath.Join(root, "go.mod"))
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/acme\n\ngo " + goVersion + "\n\n" +
			"require github.com/idemkit/idem v0.0.0-00010101000000-000000000000\n\n" +
			"replace github.com/idemkit/idem => " + root + "\n",
		"public/charge_test.go":  foreignPublic,
		"private/charge_test.go": foreignInternal,
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files["go.sum"] = string(sum)
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vet := func(pkg string) (string, error) {
		cmd := exec.Command(goBin, "vet", pkg)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := vet("./public")
	if err != nil && strings.Contains(out, "GOPROXY=off") {
		t.Skipf("a dependency of the core module is not in the module cache, and this check runs offline:\n%s", out)
	}
	if err != nil {
		t.Fatalf("a module of another path cannot compile an idemtest.Effect call written on idemtest's public API (go vet: %v):\n%s", err, out)
	}
	out, err = vet("./private")
	if err == nil || !strings.Contains(out, "use of internal package github.com/idemkit/idem/internal/fakeprovider not allowed") {
		t.Fatalf("go vet of a call written on internal/fakeprovider from another module: %v, want the internal-package error:\n%s", err, out)
	}
}

// goDirective returns the go version of the go.mod file at path.
func goDirective(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no go directive", path)
	return ""
}

// foreignPublic is what a team at another module path writes: the calls
// of every API of the provider, by its client and by an HTTP client of its
// own, with exported names only.
const foreignPublic = `package public_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/idemtest/fakeprovider"
)

func TestChargeOnce(t *testing.T) {
	idemtest.Effect(t, idemtest.EffectCall{Call: func(p *fakeprovider.Client) effect.CallFunc {
		return func(ctx context.Context, key string) ([]byte, error) {
			res, err := p.Charge(ctx, key, fakeprovider.ChargeRequest{Amount: 1200, Currency: "EUR"})
			var se *fakeprovider.StatusError
			if errors.As(err, &se) {
				return nil, fmt.Errorf("charge answered %d: %w", se.Status, err)
			}
			if err != nil {
				return nil, err
			}
			return json.Marshal(res)
		}
	}})
}

func TestSendWithOwnHTTPClient(t *testing.T) {
	idemtest.Effect(t, idemtest.EffectCall{Call: func(p *fakeprovider.Client) effect.CallFunc {
		return func(ctx context.Context, key string) ([]byte, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.BaseURL+"/emails", bytes.NewReader([]byte("{}")))
			if err != nil {
				return nil, err
			}
			req.Header.Set("Idempotency-Key", key)
			resp, err := p.HTTPClient.Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			return io.ReadAll(resp.Body)
		}
	}})
}
`

// foreignInternal is the same call written on internal/fakeprovider, which
// a module of another path cannot import.
const foreignInternal = `package private_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/fakeprovider"
)

func TestSendOnce(t *testing.T) {
	idemtest.Effect(t, idemtest.EffectCall{Call: func(p *fakeprovider.Client) effect.CallFunc {
		return func(ctx context.Context, key string) ([]byte, error) { return p.Send(ctx, key, nil) }
	}})
}
`
