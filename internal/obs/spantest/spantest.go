// Package spantest is an in-memory OpenTelemetry tracer provider for
// idem's tests: it records the spans idem's packages start, so a test can
// assert on their names, kinds, attributes, events, status and on how they
// chain into traces, without the OpenTelemetry SDK.
//
// It is built on the OpenTelemetry API alone (otel/trace, otel/attribute,
// otel/codes), so the core module's tests need no more than its library
// does. It follows the SDK's behaviour where the tests can see it: the
// default ParentBased(AlwaysSample) sampling (a root span is sampled, a
// child inherits its parent's sampled flag and an unsampled span does not
// record), random trace and span ids, later attribute values replacing
// earlier ones of the same key, RecordError as an "exception" event,
// SetStatus never downgrading (Ok over Error over Unset), and nothing
// changing once a span has ended. There are no limits on attribute,
// event or link counts.
package spantest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Attribute keys and event name of a recorded error, as OpenTelemetry's
// semantic conventions (and the SDK) name them.
const (
	EventException       = "exception"
	AttrExceptionType    = attribute.Key("exception.type")
	AttrExceptionMessage = attribute.Key("exception.message")
	AttrExceptionStack   = attribute.Key("exception.stacktrace")
)

// Options configures a Recorder made by [New].
type Options struct {
	// DropEnded makes the Recorder forget spans when they end: they are
	// still sampled and record everything while open, but Ended returns
	// nothing. It is the in-memory counterpart of an exporter that
	// discards, for benchmarks measuring what a recording span costs
	// without holding every span of the run in memory.
	DropEnded bool
}

// Recorder is a trace.TracerProvider that records the spans of its tracers
// in memory. The zero value is not usable: make one with [NewRecorder] or
// [New]. It is safe for concurrent use.
type Recorder struct {
	embedded.TracerProvider

	drop bool

	mu    sync.Mutex
	ended []*Span
}

// NewRecorder returns a Recorder that keeps every span that ends.
func NewRecorder() *Recorder { return New(Options{}) }

// New returns a Recorder configured by opts.
func New(opts Options) *Recorder { return &Recorder{drop: opts.DropEnded} }

// Tracer returns a tracer whose spans r records; name is recorded as each
// span's instrumentation scope.
func (r *Recorder) Tracer(name string, _ ...trace.TracerOption) trace.Tracer {
	return &tracer{rec: r, scope: name}
}

// Ended returns the sampled spans that have ended, in the order they
// ended. The slice is the caller's; the spans no longer change.
func (r *Recorder) Ended() []*Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ended)
}

// Reset forgets the ended spans recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = nil
}

func (r *Recorder) record(s *Span) {
	if r.drop {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, s)
}

type tracer struct {
	embedded.Tracer
	rec   *Recorder
	scope string
}

// Start opens a span: a child of the span context in ctx unless
// trace.WithNewRoot is given, sampled when it is a root or when its
// parent is sampled.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	var parent trace.SpanContext
	if !cfg.NewRoot() {
		parent = trace.SpanContextFromContext(ctx)
	}
	scc := trace.SpanContextConfig{SpanID: newSpanID()}
	if parent.IsValid() {
		scc.TraceID, scc.TraceState = parent.TraceID(), parent.TraceState()
		scc.TraceFlags = parent.TraceFlags() & trace.FlagsSampled
	} else {
		parent = trace.SpanContext{} // an invalid context in ctx is no parent
		scc.TraceID, scc.TraceFlags = newTraceID(), trace.FlagsSampled
	}
	s := &Span{rec: t.rec, scope: t.scope, sc: trace.NewSpanContext(scc), parent: parent}
	if !s.sc.IsSampled() {
		return trace.ContextWithSpan(ctx, s), s // not recording: only its context
	}
	s.recording = true
	s.name = name
	s.kind = cfg.SpanKind()
	if s.kind == trace.SpanKindUnspecified {
		s.kind = trace.SpanKindInternal
	}
	s.start = cfg.Timestamp()
	if s.start.IsZero() {
		s.start = time.Now()
	}
	s.setAttributes(cfg.Attributes())
	for _, l := range cfg.Links() {
		s.addLink(l)
	}
	return trace.ContextWithSpan(ctx, s), s
}

func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i], id[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		}
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		v := rand.Uint64()
		for i := range 8 {
			id[i] = byte(v >> (56 - 8*i))
		}
	}
	return id
}

// Status is the status of a span: its code and, for codes.Error, the
// description.
type Status struct {
	Code        codes.Code
	Description string
}

// Event is an event added to a span (RecordError adds one named
// [EventException]).
type Event struct {
	Name       string
	Attributes []attribute.KeyValue
	Time       time.Time
}

// Span is a span started by a Recorder's tracer. It is the trace.Span the
// code under test writes to and, once ended, the record a test reads
// through its accessors. An unsampled span has a valid span context but
// records nothing and is never in Ended. It is safe for concurrent use.
type Span struct {
	embedded.Span

	rec       *Recorder
	scope     string
	sc        trace.SpanContext
	parent    trace.SpanContext
	recording bool // immutable: sampled

	mu         sync.Mutex
	name       string
	kind       trace.SpanKind
	attrs      []attribute.KeyValue
	events     []Event
	links      []trace.Link
	status     Status
	start, end time.Time
	ended      bool
}

// SpanContext returns the span's own context (trace id, span id, flags).
func (s *Span) SpanContext() trace.SpanContext { return s.sc }

// Parent returns the span context the span was started under: the local
// or remote parent, or an invalid context for a root span.
func (s *Span) Parent() trace.SpanContext { return s.parent }

// IsRecording reports whether the span is sampled and not yet ended.
func (s *Span) IsRecording() bool {
	if !s.recording {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// TracerProvider returns the Recorder that made the span.
func (s *Span) TracerProvider() trace.TracerProvider { return s.rec }

// live reports whether s may still change; s.mu is held.
func (s *Span) live() bool { return s.recording && !s.ended }

// SetName renames the span.
func (s *Span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live() {
		s.name = name
	}
}

// SetAttributes records kv; a key already set takes the new value in its
// place, invalid attributes (empty key) are dropped.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live() {
		s.setAttributes(kv)
	}
}

func (s *Span) setAttributes(kv []attribute.KeyValue) {
	for _, a := range kv {
		if !a.Valid() {
			continue
		}
		if i := slices.IndexFunc(s.attrs, func(b attribute.KeyValue) bool { return b.Key == a.Key }); i >= 0 {
			s.attrs[i] = a
		} else {
			s.attrs = append(s.attrs, a)
		}
	}
}

// AddEvent records an event named name with the options' attributes and
// timestamp (now when none is given).
func (s *Span) AddEvent(name string, opts ...trace.EventOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live() {
		s.addEvent(name, trace.NewEventConfig(opts...))
	}
}

func (s *Span) addEvent(name string, cfg trace.EventConfig) {
	s.events = append(s.events, Event{Name: name, Attributes: slices.Clone(cfg.Attributes()), Time: cfg.Timestamp()})
}

// RecordError records err (when not nil) as an [EventException] event with
// its type and message, and the stack with trace.WithStackTrace(true). It
// does not change the status.
func (s *Span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(AttrExceptionType.String(typeName(err)), AttrExceptionMessage.String(err.Error())))
	cfg := trace.NewEventConfig(opts...)
	if cfg.StackTrace() {
		cfg = trace.NewEventConfig(append(opts, trace.WithAttributes(AttrExceptionStack.String(string(debug.Stack()))))...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live() {
		s.addEvent(EventException, cfg)
	}
}

func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

// AddLink records a link to another span context; a link with neither a
// valid context, attributes nor trace state is dropped.
func (s *Span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live() {
		s.addLink(l)
	}
}

func (s *Span) addLink(l trace.Link) {
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0 {
		return
	}
	l.Attributes = slices.Clone(l.Attributes)
	s.links = append(s.links, l)
}

// SetStatus sets the status unless it is already of a higher code (Ok
// over Error over Unset); the description is kept for codes.Error only.
func (s *Span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live() || s.status.Code > code {
		return
	}
	if code != codes.Error {
		description = ""
	}
	s.status = Status{Code: code, Description: description}
}

// End ends the span at the option's timestamp (now when none is given)
// and hands it to the Recorder; later calls do nothing.
func (s *Span) End(opts ...trace.SpanEndOption) {
	s.mu.Lock()
	if !s.recording || s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	cfg := trace.NewSpanEndConfig(opts...)
	s.end = cfg.Timestamp()
	if s.end.IsZero() {
		s.end = time.Now()
	}
	s.mu.Unlock()
	s.rec.record(s)
}

// Name returns the span's name.
func (s *Span) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

// SpanKind returns the span's kind (internal when none was given).
func (s *Span) SpanKind() trace.SpanKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kind
}

// InstrumentationScope returns the name of the tracer that started the
// span.
func (s *Span) InstrumentationScope() string { return s.scope }

// Attributes returns the span's attributes in the order their keys were
// first set.
func (s *Span) Attributes() []attribute.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.attrs)
}

// Events returns the span's events in the order they were added.
func (s *Span) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// Links returns the span's links: those given at start, then those added.
func (s *Span) Links() []trace.Link {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.links)
}

// Status returns the span's status.
func (s *Span) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// StartTime returns when the span started.
func (s *Span) StartTime() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start
}

// EndTime returns when the span ended, zero while it is open.
func (s *Span) EndTime() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}

// Ended reports whether the span has ended.
func (s *Span) Ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// Attr returns the value of the attribute key of the span and whether it
// is set.
func (s *Span) Attr(key attribute.Key) (attribute.Value, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.attrs {
		if a.Key == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

var _ trace.Span = (*Span)(nil)
var _ trace.TracerProvider = (*Recorder)(nil)
