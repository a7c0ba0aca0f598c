package spantest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/internal/obs/spantest"
)

func mustTraceID(t *testing.T, s string) trace.TraceID {
	t.Helper()
	id, err := trace.TraceIDFromHex(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustSpanID(t *testing.T, s string) trace.SpanID {
	t.Helper()
	id, err := trace.SpanIDFromHex(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A root span gets a fresh, valid, sampled context; a span started under
// it (through the context) is its child in the same trace; WithNewRoot
// starts a new trace whatever the context holds.
func TestParentage(t *testing.T) {
	rec := spantest.NewRecorder()
	tr := rec.Tracer("scope-a")
	ctx, root := tr.Start(context.Background(), "root")
	cctx, child := tr.Start(ctx, "child", trace.WithSpanKind(trace.SpanKindServer))
	_, grandchild := tr.Start(cctx, "grandchild")
	_, other := tr.Start(ctx, "other", trace.WithNewRoot())
	_, second := tr.Start(context.Background(), "second root")
	for _, s := range []trace.Span{grandchild, child, root, other, second} {
		s.End()
	}

	rsc := root.SpanContext()
	if !rsc.IsValid() || !rsc.IsSampled() || rsc.IsRemote() {
		t.Fatalf("root span context %+v: want valid, sampled, local", rsc)
	}
	if trace.SpanFromContext(ctx) != root || !trace.SpanContextFromContext(cctx).Equal(child.SpanContext()) {
		t.Errorf("Start's context does not hold the started span")
	}
	ended := rec.Ended()
	if len(ended) != 5 {
		t.Fatalf("%d ended spans, want 5", len(ended))
	}
	var names []string
	for _, s := range ended {
		names = append(names, s.Name())
	}
	if got := strings.Join(names, ","); got != "grandchild,child,root,other,second root" {
		t.Errorf("ended in order %s, want the order End was called", got)
	}
	g, c, r, o, s2 := ended[0], ended[1], ended[2], ended[3], ended[4]
	if r.Parent().IsValid() {
		t.Errorf("root span has parent %v", r.Parent())
	}
	if !c.Parent().Equal(rsc) || c.SpanContext().TraceID() != rsc.TraceID() || c.SpanContext().SpanID() == rsc.SpanID() {
		t.Errorf("child: parent %v trace %s span %s, want parent %v in its trace with an id of its own",
			c.Parent(), c.SpanContext().TraceID(), c.SpanContext().SpanID(), rsc)
	}
	if !g.Parent().Equal(c.SpanContext()) || g.SpanContext().TraceID() != rsc.TraceID() {
		t.Errorf("grandchild is not the child's child")
	}
	if o.Parent().IsValid() || o.SpanContext().TraceID() == rsc.TraceID() {
		t.Errorf("WithNewRoot: parent %v trace %s, want a new trace", o.Parent(), o.SpanContext().TraceID())
	}
	if s2.SpanContext().TraceID() == rsc.TraceID() || s2.SpanContext().SpanID() == rsc.SpanID() {
		t.Errorf("two root spans share ids")
	}
	if c.SpanKind() != trace.SpanKindServer || r.SpanKind() != trace.SpanKindInternal {
		t.Errorf("kinds %v %v, want server, and internal when none is given", c.SpanKind(), r.SpanKind())
	}
	if r.InstrumentationScope() != "scope-a" || r.TracerProvider() != trace.TracerProvider(rec) {
		t.Errorf("scope %q provider %v", r.InstrumentationScope(), r.TracerProvider())
	}
}

// A remote parent (a traceparent received) is honoured with its trace
// state; its sampled flag decides whether the child records: an unsampled
// child keeps a valid context in the parent's trace, records nothing, and
// is never returned by Ended, nor are its own children.
func TestRemoteParentAndSampling(t *testing.T) {
	rec := spantest.NewRecorder()
	tr := rec.Tracer("t")
	ts, err := trace.ParseTraceState("vendor=x")
	if err != nil {
		t.Fatal(err)
	}
	remote := func(flags trace.TraceFlags) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: mustTraceID(t, "4bf92f3577b34da6a3ce929d0e0e4736"), SpanID: mustSpanID(t, "00f067aa0ba902b7"),
			TraceFlags: flags, TraceState: ts, Remote: true,
		})
	}
	sampled := remote(trace.FlagsSampled)
	_, s := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), sampled), "sampled")
	if !s.IsRecording() || !s.SpanContext().IsSampled() || s.SpanContext().TraceState().Get("vendor") != "x" {
		t.Errorf("child of a sampled remote parent: recording %v context %+v", s.IsRecording(), s.SpanContext())
	}
	s.End()

	uctx, u := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), remote(0)), "unsampled")
	_, uc := tr.Start(uctx, "unsampled child")
	for _, x := range []trace.Span{u, uc} {
		x.SetAttributes(attribute.String("k", "v"))
		x.AddEvent("e")
		x.SetStatus(codes.Error, "boom")
		sc := x.SpanContext()
		if x.IsRecording() || !sc.IsValid() || sc.IsSampled() || sc.TraceID() != sampled.TraceID() {
			t.Errorf("unsampled span: recording %v context %+v, want a valid unsampled context in the remote trace", x.IsRecording(), sc)
		}
		x.End()
	}
	if !uc.(*spantest.Span).Parent().Equal(u.SpanContext()) || !u.(*spantest.Span).Parent().Equal(remote(0)) {
		t.Errorf("unsampled spans lost their parents")
	}
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "sampled" {
		t.Fatalf("ended %d spans, want only the sampled one", len(ended))
	}
	if p := ended[0].Parent(); !p.Equal(sampled) || !p.IsRemote() {
		t.Errorf("parent %+v, want the remote %+v", p, sampled)
	}
}

// The span's context propagates as a W3C traceparent naming its trace,
// its id and the sampled flag.
func TestTraceparent(t *testing.T) {
	ctx, s := spantest.NewRecorder().Tracer("t").Start(context.Background(), "s")
	defer s.End()
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, m)
	sc := s.SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; m["traceparent"] != want {
		t.Errorf("traceparent %q, want %q", m["traceparent"], want)
	}
}

// Attributes from the start options and SetAttributes are recorded, a key
// set again takes the new value in its place, invalid ones are dropped;
// events, errors, links, name and status follow the SDK's rules; nothing
// changes once the span has ended.
func TestRecordedData(t *testing.T) {
	rec := spantest.NewRecorder()
	linked := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: mustTraceID(t, "0af7651916cd43dd8448eb211c80319c"), SpanID: mustSpanID(t, "b7ad6b7169203331")})
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	_, sp := rec.Tracer("t").Start(context.Background(), "first name",
		trace.WithAttributes(attribute.String("a", "1"), attribute.Int("b", 2)),
		trace.WithLinks(trace.Link{SpanContext: linked}, trace.Link{}),
		trace.WithTimestamp(start))
	sp.SetAttributes(attribute.String("c", "3"), attribute.String("a", "one"), attribute.KeyValue{})
	sp.SetName("renamed")
	evAt := start.Add(time.Second)
	sp.AddEvent("retrying", trace.WithAttributes(attribute.Int("attempt", 2)), trace.WithTimestamp(evAt))
	sp.RecordError(nil)
	sp.RecordError(fmt.Errorf("wrapped: %w", errors.ErrUnsupported))
	sp.RecordError(errors.New("with stack"), trace.WithStackTrace(true))
	sp.AddLink(trace.Link{SpanContext: linked, Attributes: []attribute.KeyValue{attribute.Bool("late", true)}})
	sp.AddLink(trace.Link{})
	sp.SetStatus(codes.Error, "payment failed")
	sp.SetStatus(codes.Unset, "")
	end := start.Add(2 * time.Second)
	sp.End(trace.WithTimestamp(end))
	if sp.IsRecording() {
		t.Errorf("an ended span is recording")
	}
	// After End: ignored.
	sp.SetAttributes(attribute.String("late", "x"))
	sp.AddEvent("late")
	sp.SetName("late")
	sp.SetStatus(codes.Ok, "")
	sp.AddLink(trace.Link{SpanContext: linked})
	sp.End()

	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d ended spans, want 1 (End twice records once)", len(ended))
	}
	s := ended[0]
	if s.Name() != "renamed" {
		t.Errorf("name %q", s.Name())
	}
	if got := fmt.Sprint(s.Attributes()); got != fmt.Sprint([]attribute.KeyValue{
		attribute.String("a", "one"), attribute.Int("b", 2), attribute.String("c", "3")}) {
		t.Errorf("attributes %s", got)
	}
	if v, ok := s.Attr("b"); !ok || v.AsInt64() != 2 {
		t.Errorf("Attr(b) = %v %v", v, ok)
	}
	if _, ok := s.Attr("late"); ok {
		t.Errorf("an attribute set after End was recorded")
	}
	ev := s.Events()
	if len(ev) != 3 {
		t.Fatalf("%d events, want 3: %+v", len(ev), ev)
	}
	if ev[0].Name != "retrying" || !ev[0].Time.Equal(evAt) || fmt.Sprint(ev[0].Attributes) != fmt.Sprint([]attribute.KeyValue{attribute.Int("attempt", 2)}) {
		t.Errorf("event %+v", ev[0])
	}
	exc := map[attribute.Key]string{}
	for _, kv := range ev[1].Attributes {
		exc[kv.Key] = kv.Value.Emit()
	}
	if ev[1].Name != spantest.EventException || exc[spantest.AttrExceptionType] != "*fmt.wrapError" ||
		exc[spantest.AttrExceptionMessage] != "wrapped: unsupported operation" || exc[spantest.AttrExceptionStack] != "" {
		t.Errorf("recorded error: %s %v", ev[1].Name, exc)
	}
	if ev[1].Time.IsZero() {
		t.Errorf("an event without a timestamp got none")
	}
	stack := ""
	for _, kv := range ev[2].Attributes {
		if kv.Key == spantest.AttrExceptionStack {
			stack = kv.Value.AsString()
		}
	}
	if !strings.Contains(stack, "TestRecordedData") {
		t.Errorf("WithStackTrace: stack %q does not name the caller", stack)
	}
	links := s.Links()
	if len(links) != 2 || !links[0].SpanContext.Equal(linked) || len(links[0].Attributes) != 0 ||
		!links[1].SpanContext.Equal(linked) || fmt.Sprint(links[1].Attributes) != fmt.Sprint([]attribute.KeyValue{attribute.Bool("late", true)}) {
		t.Errorf("links %+v, want the start link and the added one, empty ones dropped", links)
	}
	if st := s.Status(); st != (spantest.Status{Code: codes.Error, Description: "payment failed"}) {
		t.Errorf("status %+v: Unset and calls after End must not change it", st)
	}
	if !s.StartTime().Equal(start) || !s.EndTime().Equal(end) || !s.Ended() {
		t.Errorf("start %v end %v ended %v", s.StartTime(), s.EndTime(), s.Ended())
	}
}

// Ok wins over Error and keeps no description; Error does not replace Ok.
func TestStatusPrecedence(t *testing.T) {
	rec := spantest.NewRecorder()
	_, a := rec.Tracer("t").Start(context.Background(), "a")
	a.SetStatus(codes.Error, "first")
	a.SetStatus(codes.Error, "second")
	a.End()
	_, b := rec.Tracer("t").Start(context.Background(), "b")
	b.SetStatus(codes.Error, "failed")
	b.SetStatus(codes.Ok, "ignored")
	b.SetStatus(codes.Error, "too late")
	b.End()
	_, c := rec.Tracer("t").Start(context.Background(), "c")
	c.End()
	got := []spantest.Status{}
	for _, s := range rec.Ended() {
		got = append(got, s.Status())
	}
	want := []spantest.Status{{codes.Error, "second"}, {codes.Ok, ""}, {codes.Unset, ""}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
}

// Spans started, written and ended from many goroutines are all recorded
// with their own data (run with -race); Reset forgets them.
func TestConcurrent(t *testing.T) {
	rec := spantest.NewRecorder()
	tr := rec.Tracer("t")
	ctx, parent := tr.Start(context.Background(), "parent")
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, s := tr.Start(ctx, "child")
			s.SetAttributes(attribute.Int("i", i))
			parent.SetAttributes(attribute.Int(fmt.Sprint("p", i), i))
			parent.AddEvent("child")
			s.End()
		})
	}
	wg.Wait()
	parent.End()
	ended := rec.Ended()
	if len(ended) != n+1 {
		t.Fatalf("%d ended spans, want %d", len(ended), n+1)
	}
	seen := map[int64]bool{}
	ids := map[trace.SpanID]bool{}
	for _, s := range ended[:n] {
		v, _ := s.Attr("i")
		seen[v.AsInt64()] = true
		ids[s.SpanContext().SpanID()] = true
		if !s.Parent().Equal(parent.SpanContext()) {
			t.Errorf("child with parent %v", s.Parent())
		}
	}
	if len(seen) != n || len(ids) != n {
		t.Errorf("%d distinct attribute values and %d span ids, want %d", len(seen), len(ids), n)
	}
	p := ended[n]
	if len(p.Attributes()) != n || len(p.Events()) != n {
		t.Errorf("parent: %d attributes %d events, want %d", len(p.Attributes()), len(p.Events()), n)
	}
	rec.Reset()
	if len(rec.Ended()) != 0 {
		t.Errorf("Reset kept spans")
	}
}

// With DropEnded spans record while open but are not kept.
func TestDropEnded(t *testing.T) {
	rec := spantest.New(spantest.Options{DropEnded: true})
	_, s := rec.Tracer("t").Start(context.Background(), "s")
	if !s.IsRecording() || !s.SpanContext().IsSampled() {
		t.Fatalf("span not recording")
	}
	s.SetAttributes(attribute.String("k", "v"))
	if v, ok := s.(*spantest.Span).Attr("k"); !ok || v.AsString() != "v" {
		t.Errorf("open span lost its attribute")
	}
	s.End()
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans kept", n)
	}
}
