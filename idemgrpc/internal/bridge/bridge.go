// Package bridge runs one unary RPC through an idemhttp.Middleware, so the
// gRPC and Connect interceptors inherit every guarantee of the HTTP
// middleware (the primary key decides, the transactional accessor, leases,
// fencing, retention, tracing) instead of re-implementing its storage.
//
// A call becomes a synthesized request: POST, path and operation = the
// full method (or procedure), body = the request message's deterministic
// proto bytes, Content-Type application/grpc+proto, Idempotency-Key = the
// call's key values. The inner handler runs the RPC handler with the
// request's context (which carries idemhttp's state: idemhttp.Tx, Key…)
// and writes its outcome in a stored form: 200 with the response's bytes,
// or, for an error, the google.rpc.Status bytes with the code in the
// Grpc-Status header — 200 when the code is one to store, otherwise the
// code's usual HTTP status, which is never 200 and which idemhttp then
// neither stores nor commits (StoreStatus is status == 200).
package bridge

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// The codes of google.rpc.Code (the same numbers in gRPC and Connect).
const (
	OK                 = 0
	Canceled           = 1
	Unknown            = 2
	InvalidArgument    = 3
	DeadlineExceeded   = 4
	NotFound           = 5
	AlreadyExists      = 6
	PermissionDenied   = 7
	ResourceExhausted  = 8
	FailedPrecondition = 9
	Aborted            = 10
	OutOfRange         = 11
	Unimplemented      = 12
	Internal           = 13
	Unavailable        = 14
	DataLoss           = 15
	Unauthenticated    = 16
)

// Defaults of the limits: gRPC's default largest received message.
const (
	DefaultMaxRequestBytes  = 4 << 20
	DefaultMaxResponseBytes = 4 << 20
)

// Domain is the ErrorInfo domain of the interceptors' own errors.
const Domain = "github.com/idemkit/idem"

// The ErrorInfo reasons of the interceptors' own errors.
const (
	ReasonKeyMissing          = "IDEMPOTENCY_KEY_MISSING"
	ReasonKeyInvalid          = "IDEMPOTENCY_KEY_INVALID"
	ReasonKeyReused           = "IDEMPOTENCY_KEY_REUSED"
	ReasonInFlight            = "IDEMPOTENCY_KEY_IN_FLIGHT"
	ReasonLeaseLost           = "IDEMPOTENCY_LEASE_LOST"
	ReasonNeedsReconciliation = "IDEMPOTENCY_KEY_NEEDS_RECONCILIATION"
	ReasonStoreUnavailable    = "IDEMPOTENCY_STORE_UNAVAILABLE"
	ReasonTenantRejected      = "IDEMPOTENCY_TENANT_REJECTED"
	ReasonOperationInvalid    = "IDEMPOTENCY_OPERATION_INVALID"
	ReasonRequestTooLarge     = "IDEMPOTENCY_REQUEST_TOO_LARGE"
	ReasonResponseTooLarge    = "IDEMPOTENCY_RESPONSE_TOO_LARGE"
)

// HeaderStatus carries the code of a stored error outcome.
const HeaderStatus = "Grpc-Status"

// ContentType is the media type of the synthesized request and of a
// stored response.
const ContentType = "application/grpc+proto"

// statusContentType is the media type of a stored google.rpc.Status.
const statusContentType = "application/x-protobuf; proto=google.rpc.Status"

// Marshal is the deterministic proto marshalling of requests and
// responses: the same message gives the same bytes within one build
// (maps in key order).
var Marshal = proto.MarshalOptions{Deterministic: true}

// Options configure an Engine.
type Options struct {
	// Tenant scopes keys; nil: one shared tenant "".
	Tenant func(ctx context.Context) (string, error)
	// StoreCode reports whether an error with this code is stored (and
	// its transaction committed). A successful call is always stored.
	StoreCode func(code int32) bool
	// HTTP is the caller's idemhttp configuration; the fields that shape
	// the synthesized requests are overwritten.
	HTTP idemhttp.Config
}

// Engine drives one idemhttp.Middleware for RPCs.
type Engine struct {
	h         http.Handler
	storeCode func(int32) bool
	retry     time.Duration
}

// New returns an Engine storing records through d.
func New[TTx any](d store.Driver[TTx], o Options) (*Engine, error) {
	cfg := o.HTTP
	tenant := o.Tenant
	if tenant == nil {
		tenant = func(context.Context) (string, error) { return "", nil }
	}
	cfg.Tenant = func(r *http.Request) (string, error) { return tenant(r.Context()) }
	cfg.Operation = func(r *http.Request) string { return callFrom(r.Context()).Operation }
	cfg.Optional = false
	cfg.StoreStatus = func(status int) bool { return status == http.StatusOK }
	cfg.ReplayHeaders = []string{"Content-Type", HeaderStatus}
	cfg.FingerprintHeaders, cfg.ExcludeFields, cfg.ExcludeQuery = nil, nil, nil
	cfg.ErrorHandler = func(_ http.ResponseWriter, r *http.Request, p *idemhttp.Problem) {
		callFrom(r.Context()).problem = p
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxStoredBody == 0 {
		cfg.MaxStoredBody = DefaultMaxResponseBytes
	}
	// A response is either stored whole or not answered: a replay without
	// its body would be a wrong message, not an omitted one.
	cfg.MaxResponseBytes = int64(cfg.MaxStoredBody)
	mw, err := idemhttp.New(d, cfg)
	if err != nil {
		return nil, err
	}
	storeCode := o.StoreCode
	if storeCode == nil {
		storeCode = DefaultStoreCode
	}
	retry := cfg.RetryAfter
	if retry <= 0 {
		retry = time.Second // idemhttp.Config.RetryAfter's default
	}
	e := &Engine{storeCode: storeCode, retry: retry}
	e.h = mw.Handler(http.HandlerFunc(e.inner))
	return e, nil
}

// DefaultStoreCode stores NotFound and AlreadyExists, the definite
// answers among the errors; every other error is not stored (in
// transactional mode its writes roll back) and the retry executes again.
func DefaultStoreCode(code int32) bool {
	return code == NotFound || code == AlreadyExists
}

// Result is a handler's outcome in stored form.
type Result struct {
	Body   []byte      // the response's bytes, when Status is nil
	Status *spb.Status // the handler's error
	Err    error       // the outcome cannot be stored (not a proto message): not recorded
}

// Call is one unary RPC.
type Call struct {
	Operation string   // full method or procedure: the operation and the path
	Keys      []string // the idempotency-key values the call carried
	Request   []byte   // the request message, deterministic proto bytes
	// Run runs the handler with ctx, which carries idemhttp's state.
	Run func(ctx context.Context) Result

	ran     bool
	problem *idemhttp.Problem
	// storedErr: the handler's last result was an error of a code that is
	// stored (Engine.storeCode).
	storedErr bool
}

// Outcome is what the middleware did with a call.
type Outcome struct {
	// Executed: Run ran and its outcome is the answer; the caller returns
	// the handler's own values.
	Executed bool
	// Replayed: a stored outcome is the answer, Body (a response) or
	// Status (an error).
	Replayed bool
	Body     []byte
	Status   *spb.Status
	// Problem: the middleware answered itself (Executed may be true too:
	// the handler ran but its outcome could not be recorded).
	Problem *idemhttp.Problem
}

type callKey struct{}

func callFrom(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// Do runs c through the middleware.
func (e *Engine) Do(ctx context.Context, c *Call) Outcome {
	ctx = context.WithValue(ctx, callKey{}, c)
	h := http.Header{"Content-Type": {ContentType}}
	if len(c.Keys) > 0 {
		h[idemhttp.HeaderKey] = c.Keys
	}
	r := (&http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Path: c.Operation},
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(c.Request)),
		ContentLength: int64(len(c.Request)),
		Host:          "idem.rpc",
		RequestURI:    c.Operation,
	}).WithContext(ctx)
	rec := &recorder{header: make(http.Header)}
	e.h.ServeHTTP(rec, r)
	switch {
	case c.problem != nil && c.ran && c.storedErr && c.problem.Type == idemhttp.TypeStoreUnavailable:
		// The handler answered with an error meant to be stored, and
		// recording it failed: its transaction, if any, rolled back, so
		// nothing took effect. The handler's own error is the answer,
		// unstored, and a retry executes again. (On PostgreSQL a statement
		// that failed in the handler, a unique violation behind an
		// AlreadyExists say, aborts the transaction: storing its answer
		// can never succeed, and Unavailable would be answered for ever.)
		return Outcome{Executed: true}
	case c.problem != nil:
		return Outcome{Problem: c.problem, Executed: c.ran}
	case rec.header.Get(idemhttp.HeaderReplayed) == "true":
		out := Outcome{Replayed: true}
		if rec.header.Get(HeaderStatus) == "" {
			out.Body = rec.body.Bytes()
			return out
		}
		st := &spb.Status{}
		if err := proto.Unmarshal(rec.body.Bytes(), st); err != nil {
			st = &spb.Status{Code: Internal, Message: "idem: stored status does not decode: " + err.Error()}
		}
		out.Status = st
		return out
	case c.ran:
		return Outcome{Executed: true}
	}
	return Outcome{Problem: &idemhttp.Problem{Status: http.StatusInternalServerError, Title: "no decision",
		Type: idemhttp.TypeStoreUnavailable, Err: idemhttp.ErrStoreUnavailable}}
}

func (e *Engine) inner(w http.ResponseWriter, r *http.Request) {
	c := callFrom(r.Context())
	c.ran = true
	res := c.Run(r.Context())
	c.storedErr = res.Err == nil && res.Status != nil && res.Status.Code != OK && e.storeCode(res.Status.Code)
	switch {
	case res.Err != nil:
		w.WriteHeader(http.StatusInternalServerError)
	case res.Status == nil:
		w.Header().Set("Content-Type", ContentType)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(res.Body)
	default:
		b, err := Marshal.Marshal(res.Status)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", statusContentType)
		w.Header().Set(HeaderStatus, strconv.Itoa(int(res.Status.Code)))
		if res.Status.Code != OK && e.storeCode(res.Status.Code) {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(httpStatus(res.Status.Code))
		}
		_, _ = w.Write(b)
	}
}

// httpStatus is the usual HTTP status of a code (as gRPC gateways map
// them); never 200 for an error.
func httpStatus(code int32) int {
	switch code {
	case Canceled:
		return 499
	case InvalidArgument, FailedPrecondition, OutOfRange:
		return http.StatusBadRequest
	case DeadlineExceeded:
		return http.StatusGatewayTimeout
	case NotFound:
		return http.StatusNotFound
	case AlreadyExists, Aborted:
		return http.StatusConflict
	case PermissionDenied:
		return http.StatusForbidden
	case ResourceExhausted:
		return http.StatusTooManyRequests
	case Unimplemented:
		return http.StatusNotImplemented
	case Unavailable:
		return http.StatusServiceUnavailable
	case Unauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// recorder receives the middleware's answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}

// StatusOf maps the middleware's own answer to a status: the code, the
// problem's title and detail as message, an ErrorInfo (Domain, a reason,
// the problem type and the key) and, for answers worth retrying, a
// RetryInfo. The second result is the retry delay (0: do not retry).
func StatusOf(p *idemhttp.Problem) (*spb.Status, time.Duration) {
	var code int32
	var reason string
	retry := time.Duration(0)
	switch p.Type {
	case idemhttp.TypeKeyMissing:
		code, reason = InvalidArgument, ReasonKeyMissing
	case idemhttp.TypeKeyInvalid:
		code, reason = InvalidArgument, ReasonKeyInvalid
	case idemhttp.TypeKeyReused:
		code, reason = FailedPrecondition, ReasonKeyReused
	case idemhttp.TypeInFlight:
		code, reason, retry = Aborted, ReasonInFlight, max(p.RetryAfter, time.Millisecond)
	case idemhttp.TypeLeaseLost:
		code, reason, retry = Aborted, ReasonLeaseLost, max(p.RetryAfter, time.Millisecond)
	case idemhttp.TypeNeedsReconciliation:
		code, reason = FailedPrecondition, ReasonNeedsReconciliation
	case idemhttp.TypeStoreUnavailable:
		code, reason, retry = Unavailable, ReasonStoreUnavailable, max(p.RetryAfter, time.Millisecond)
	case idemhttp.TypeUnauthorized:
		code, reason = Unauthenticated, ReasonTenantRejected
	case idemhttp.TypeOperationInvalid:
		code, reason = Internal, ReasonOperationInvalid
	case idemhttp.TypeBodyTooLarge:
		code, reason = ResourceExhausted, ReasonRequestTooLarge
	case idemhttp.TypeResponseTooLarge:
		code, reason = ResourceExhausted, ReasonResponseTooLarge
	default:
		code, reason = Internal, strings.TrimPrefix(p.Type, "https://pkg.go.dev/github.com/idemkit/idem/idemhttp#")
	}
	msg := "idem: " + p.Title
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	md := map[string]string{"type": p.Type}
	if p.Key != "" {
		md["idempotency_key"] = p.Key
	}
	st := &spb.Status{Code: code, Message: msg}
	if a, err := anypb.New(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: md}); err == nil {
		st.Details = append(st.Details, a)
	}
	if retry > 0 {
		if a, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
			st.Details = append(st.Details, a)
		}
	}
	return st, retry
}

// ReasonOf returns the reason of the ErrorInfo of Domain among details,
// or "".
func ReasonOf(details []*anypb.Any) string {
	for _, a := range details {
		var info errdetails.ErrorInfo
		if a.MessageIs(&info) && a.UnmarshalTo(&info) == nil && info.GetDomain() == Domain {
			return info.GetReason()
		}
	}
	return ""
}

// RetryDelayOf returns the RetryInfo delay among details, or 0.
func RetryDelayOf(details []*anypb.Any) time.Duration {
	for _, a := range details {
		var ri errdetails.RetryInfo
		if a.MessageIs(&ri) && a.UnmarshalTo(&ri) == nil {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// Method finds the descriptor of a full method ("/pkg.Service/Method" or
// "pkg.Service/Method") in files; nil when it is not registered.
func Method(files *protoregistry.Files, fullMethod string) protoreflect.MethodDescriptor {
	if files == nil {
		files = protoregistry.GlobalFiles
	}
	svc, name, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return nil
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	return sd.Methods().ByName(protoreflect.Name(name))
}

// InfrastructureMethod reports whether fullMethod ("/pkg.Service/Method")
// belongs to a service every gRPC server may carry that changes nothing:
// health checking (grpc.health.v1), server reflection (grpc.reflection.*)
// and channelz (grpc.channelz.*). They pass through without a key: probes
// and tools never send one, and their descriptors declare no idempotency
// level.
func InfrastructureMethod(fullMethod string) bool {
	for _, p := range []string{"/grpc.health.v1.", "/grpc.reflection.", "/grpc.channelz."} {
		if strings.HasPrefix(fullMethod, p) {
			return true
		}
	}
	return false
}

// SafeMethod reports whether md declares idempotency_level
// NO_SIDE_EFFECTS or IDEMPOTENT.
func SafeMethod(md protoreflect.MethodDescriptor) bool {
	if md == nil {
		return false
	}
	o, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok {
		return false
	}
	switch o.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
		return true
	}
	return false
}

// NewOutput returns an empty message of md's output type: the generated
// type when types has it, else a dynamic message. Without md it returns an
// empty message that keeps every field as unknown fields, which marshal
// back to the same bytes (binary codecs only).
func NewOutput(types *protoregistry.Types, md protoreflect.MethodDescriptor) proto.Message {
	if md == nil {
		return &emptypb.Empty{}
	}
	if types == nil {
		types = protoregistry.GlobalTypes
	}
	if mt, err := types.FindMessageByName(md.Output().FullName()); err == nil {
		return mt.New().Interface()
	}
	return dynamicpb.NewMessage(md.Output())
}
