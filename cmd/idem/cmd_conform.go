package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/idem/conform"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
)

// runConform probes a server for the Idempotency-Key contract: "idem
// conform URL --route 'POST /orders' --body FILE --tenant-header NAME
// --tenants a,b --header K:V --json". It exits 1 when a check fails.
func runConform(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "conform", "URL [--route 'POST /orders'] [--body FILE] [--tenant-header NAME --tenants a,b] [--header K:V …] [--fail-header K:V] [--json]")
	route := fs.String("route", "POST /orders", "route under test, 'METHOD /path'")
	bodyFile := fs.String("body", "", "file holding a request body the target accepts (JSON; '-' reads standard input); default "+conform.DefaultBody)
	tenantHeader := fs.String("tenant-header", "", "header naming the tenant (with --tenants)")
	tenants := fs.String("tenants", "", "comma-separated tenants: every probe runs as the first, the tenant check uses the first two")
	var headers, fail listFlag
	fs.Var(&headers, "header", "header added to every request, K:V (repeatable)")
	fs.Var(&fail, "fail-header", "header the target answers with a 5xx, K:V (e.g. X-Upstream-Fail:500 for examples/upstream-node); without it the 5xx check is SKIP")
	concurrency := fs.Int("concurrency", 8, "simultaneous retries of the concurrency check")
	timeout := fs.Duration("timeout", 30*time.Second, "timeout of each request")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want exactly one target URL (e.g. idem conform http://127.0.0.1:8080)", errUsage)
	}
	target := fs.Arg(0)
	if !strings.HasPrefix(target, "http://") && !strings.HasPrefix(target, "https://") {
		return fmt.Errorf("%w: the target must be an http:// or https:// URL", errUsage)
	}
	rt, err := idemproxy.ParseRoute(*route)
	if err != nil || rt.Method == "" || rt.Operation != "" || rt.ExactPath {
		return fmt.Errorf("%w: --route %q: want 'METHOD /path', e.g. 'POST /orders'", errUsage, *route)
	}
	if *concurrency < 2 || *concurrency > 256 {
		return fmt.Errorf("%w: --concurrency must be between 2 and 256", errUsage)
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be positive", errUsage)
	}
	cfg := conform.Config{URL: target, Method: rt.Method, Path: rt.Path, TenantHeader: *tenantHeader,
		Concurrency: *concurrency, Client: &http.Client{Timeout: *timeout}}
	if *tenants != "" {
		for _, t := range strings.Split(*tenants, ",") {
			if t = strings.TrimSpace(t); t != "" {
				cfg.Tenants = append(cfg.Tenants, t)
			}
		}
		if *tenantHeader == "" {
			return fmt.Errorf("%w: --tenants needs --tenant-header", errUsage)
		}
	}
	if *tenantHeader != "" && len(cfg.Tenants) == 0 {
		return fmt.Errorf("%w: --tenant-header needs --tenants a,b", errUsage)
	}
	if cfg.Header, err = parseHeaders("--header", headers); err != nil {
		return err
	}
	if cfg.FailHeader, err = parseHeaders("--fail-header", fail); err != nil {
		return err
	}
	if *bodyFile != "" {
		var b []byte
		if *bodyFile == "-" {
			if env.Stdin != nil {
				b, err = io.ReadAll(io.LimitReader(env.Stdin, 16<<20))
			}
		} else {
			b, err = os.ReadFile(*bodyFile)
		}
		if err != nil {
			return fmt.Errorf("%w: --body: %v", errUsage, err)
		}
		if len(strings.TrimSpace(string(b))) == 0 {
			return fmt.Errorf("%w: --body %s is empty", errUsage, *bodyFile)
		}
		cfg.Body = b
	}
	if env.CheckOnly {
		return nil
	}
	rep, err := conform.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *asJSON {
		if err := printJSON(env, rep); err != nil {
			return err
		}
	} else {
		var b strings.Builder
		_ = rep.WriteTable(&b)
		fmt.Fprint(env.Stdout, termSafeLines(b.String()))
	}
	if !rep.OK() {
		return errFailed
	}
	return nil
}

// termSafeLines makes each line of s terminal-safe, keeping the newlines.
func termSafeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = termSafe(l)
	}
	return strings.Join(lines, "\n")
}

func parseHeaders(flagName string, vals []string) (http.Header, error) {
	h := http.Header{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\r\n") || strings.ContainsAny(val, "\r\n") {
			return nil, fmt.Errorf("%w: %s %q: want K:V", errUsage, flagName, v)
		}
		h.Add(k, strings.TrimSpace(val))
	}
	return h, nil
}
