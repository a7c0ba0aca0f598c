package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/internal/redact"
)

// traceFlags are the tracing flags of "idem demo" and "idem drill".
type traceFlags struct {
	file *string
	otlp *string
}

// addTraceFlags registers --trace-file and --otlp on fs.
func addTraceFlags(fs *flag.FlagSet) traceFlags {
	return traceFlags{
		file: fs.String("trace-file", "", "write OpenTelemetry spans to FILE, one JSON object per line (the SDK's stdout exporter)"),
		otlp: fs.String("otlp", "", "send OpenTelemetry spans over OTLP/HTTP to URL, e.g. http://127.0.0.1:4318 (…/v1/traces is added when the URL has no path)"),
	}
}

// describe names where spans go, without credentials ("" when nowhere).
func (f traceFlags) describe() string {
	switch {
	case *f.file != "" && *f.otlp != "":
		return *f.file + " (JSON lines) and OTLP " + redact.URL(*f.otlp)
	case *f.file != "":
		return *f.file + " (JSON lines, one span each)"
	case *f.otlp != "":
		return "OTLP/HTTP " + redact.URL(*f.otlp)
	}
	return ""
}

// setup installs, when a flag asks for it, an SDK tracer provider that
// samples every span as the global provider (idem's components default to
// otel.GetTracerProvider()) and returns it with the function that flushes
// and stops it. Without the flags it installs nothing and returns the
// global provider and a no-op.
func (f traceFlags) setup(ctx context.Context, service string) (trace.TracerProvider, func() error, error) {
	if *f.file == "" && *f.otlp == "" {
		return otel.GetTracerProvider(), func() error { return nil }, nil
	}
	var opts []sdktrace.TracerProviderOption
	var closers []func() error
	if *f.file != "" {
		out, err := os.OpenFile(*f.file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --trace-file: %v", errUsage, err)
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			out.Close()
			return nil, nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
		closers = append(closers, out.Close)
	}
	if *f.otlp != "" {
		u, err := url.Parse(*f.otlp)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, nil, fmt.Errorf("%w: --otlp must be an http:// or https:// URL (got %q)", errUsage, redact.URL(*f.otlp))
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
		if err != nil {
			return nil, nil, fmt.Errorf("--otlp %s: %w", redact.URL(*f.otlp), err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res), sdktrace.WithSampler(sdktrace.AlwaysSample()))...)
	otel.SetTracerProvider(tp)
	shutdown := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := tp.Shutdown(sctx) // flushes the batchers
		for _, c := range closers {
			err = errors.Join(err, c())
		}
		return err
	}
	return tp, shutdown, nil
}
