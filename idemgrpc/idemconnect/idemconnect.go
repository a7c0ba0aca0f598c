// Package idemconnect gives connect-go unary procedures the
// Idempotency-Key contract of package idemhttp, as a connect.Interceptor:
// a retried call with the same key never runs the handler twice, its
// stored response (or stored error) is replayed, and in transactional mode
// the handler's writes and the key record commit in one transaction.
//
//	d, err := sqlstore.OpenSQLite("orders.db", sqlstore.SQLiteConfig{}, sqlstore.Config{}) // or pgxstore.Open: pgx.Tx
//	if err := migrate.Up(ctx, d); err != nil { … }
//	idem, err := idemconnect.NewInterceptor(d, idemconnect.Config{Tenant: tenantOf}) // func(ctx) (string, error)
//	if err != nil { … }
//	mux.Handle(ordersv1connect.NewOrdersHandler(&orders{}, connect.WithInterceptors(idem)))
//
//	func (s *orders) Create(ctx context.Context, req *connect.Request[pb.CreateRequest]) (*connect.Response[pb.Order], error) {
//		tx, _ := idemconnect.SQLTx(ctx) // the key's transaction: never commit it
//		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, item) VALUES (?, ?)`, id, req.Msg.Item); err != nil {
//			return nil, connect.NewError(connect.CodeUnavailable, err) // not stored: rolled back
//		}
//		return connect.NewResponse(&pb.Order{Id: id}), nil // stored; a retry with the key replays it
//	}
//
//	client := ordersv1connect.NewOrdersClient(http.DefaultClient, url, connect.WithInterceptors(idemconnect.NewClientInterceptor(idemconnect.ClientConfig{})))
//
// The key travels in the Idempotency-Key header, in every protocol
// connect-go serves (Connect, gRPC, gRPC-Web). The scope is the tenant
// (Config.Tenant, from the handler's context, where
// connect.CallInfoForHandlerContext gives the request headers) plus the
// procedure ("/pkg.Service/Method"). The fingerprint covers the procedure
// and the request message marshalled as deterministic binary proto,
// whatever codec the client used: the same message sent as JSON and as
// binary proto is one request.
//
// The answers are those of package idemgrpc, as connect codes (the same
// numbers), with the same google.rpc.ErrorInfo and RetryInfo details:
// FailedPrecondition for a key reused with another request, Aborted with
// RetryInfo while the key is in flight, InvalidArgument for a missing or
// malformed key, Unauthenticated when Config.Tenant fails, Unavailable
// when the key store fails; a replay carries the response header
// "Idempotent-Replayed: true". Procedures declared NO_SIDE_EFFECTS or
// IDEMPOTENT (connect.WithIdempotency, which generated code sets from the
// proto option) pass through unless Config.IncludeIdempotent. See
// package idemgrpc for why these codes, and package idemhttp for the
// guarantees of the middleware this interceptor drives.
//
// A replay answers a new value of the procedure's output type (the
// generated type when protoregistry.GlobalTypes or Config.Types has it,
// else a dynamicpb message of the schema's output descriptor), wrapped so
// that Response.Any is not the generated pointer type: an interceptor
// outside this one that asserts the concrete type of Any sees the
// wrapper. Headers and trailers the handler set are not stored. Streaming
// procedures pass through.
package idemconnect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemkit/idem/idemgrpc/internal/bridge"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// HeaderKey is the request header carrying the idempotency key.
const HeaderKey = idemhttp.HeaderKey

// HeaderReplayed is the response header set to "true" on a replay.
const HeaderReplayed = idemhttp.HeaderReplayed

// Domain is the ErrorInfo domain of the interceptor's own errors.
const Domain = bridge.Domain

// The ErrorInfo reasons of the interceptor's own errors, as in idemgrpc.
const (
	ReasonKeyMissing          = bridge.ReasonKeyMissing
	ReasonKeyInvalid          = bridge.ReasonKeyInvalid
	ReasonKeyReused           = bridge.ReasonKeyReused
	ReasonInFlight            = bridge.ReasonInFlight
	ReasonLeaseLost           = bridge.ReasonLeaseLost
	ReasonNeedsReconciliation = bridge.ReasonNeedsReconciliation
	ReasonStoreUnavailable    = bridge.ReasonStoreUnavailable
	ReasonTenantRejected      = bridge.ReasonTenantRejected
	ReasonOperationInvalid    = bridge.ReasonOperationInvalid
	ReasonRequestTooLarge     = bridge.ReasonRequestTooLarge
	ReasonResponseTooLarge    = bridge.ReasonResponseTooLarge
)

// Config configures NewInterceptor; its fields mean what idemgrpc.Config's
// do. The zero value is usable.
type Config struct {
	// Tenant returns the tenant that scopes the key; an error answers
	// Unauthenticated. Defaults to one shared tenant "".
	Tenant func(ctx context.Context) (string, error)
	// Optional lets calls without a key pass through untouched.
	Optional bool
	// IncludeIdempotent handles NO_SIDE_EFFECTS and IDEMPOTENT procedures
	// too.
	IncludeIdempotent bool
	// StoreCode reports whether a handler's error with this code is
	// stored. Defaults to DefaultStoreCode.
	StoreCode func(connect.Code) bool
	// Types finds the generated output types of replays. Defaults to
	// protoregistry.GlobalTypes.
	Types *protoregistry.Types
	// Middleware configures the idemhttp.Middleware behind the
	// interceptor, as idemgrpc.Config.Middleware.
	Middleware idemhttp.Config
}

// DefaultStoreCode stores NotFound and AlreadyExists, as
// idemgrpc.DefaultStoreCode.
func DefaultStoreCode(c connect.Code) bool { return bridge.DefaultStoreCode(int32(c)) }

// NewInterceptor returns the server interceptor storing its records
// through d. It fails as idemhttp.New does. On a client it does nothing;
// use NewClientInterceptor there.
func NewInterceptor[TTx any](d store.Driver[TTx], cfg Config) (connect.Interceptor, error) {
	storeCode := cfg.StoreCode
	if storeCode == nil {
		storeCode = DefaultStoreCode
	}
	eng, err := bridge.New(d, bridge.Options{
		Tenant:    cfg.Tenant,
		StoreCode: func(c int32) bool { return storeCode(connect.Code(c)) },
		HTTP:      cfg.Middleware,
	})
	if err != nil {
		return nil, err
	}
	return &interceptor{eng: eng, cfg: cfg}, nil
}

type interceptor struct {
	eng *bridge.Engine
	cfg Config
}

// WrapStreamingClient implements connect.Interceptor: streams pass through.
func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor: streams pass through.
func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// WrapUnary implements connect.Interceptor.
func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient || bridge.InfrastructureMethod(spec.Procedure) {
			return next(ctx, req) // and health checks, reflection
		}
		if !i.cfg.IncludeIdempotent && (spec.IdempotencyLevel == connect.IdempotencyNoSideEffects || spec.IdempotencyLevel == connect.IdempotencyIdempotent) {
			return next(ctx, req)
		}
		keys := req.Header().Values(HeaderKey)
		if len(keys) == 0 && i.cfg.Optional {
			return next(ctx, req)
		}
		msg, ok := req.Any().(proto.Message)
		if !ok {
			return nil, connect.NewError(connect.CodeInternal, errors.New("idemconnect: request is not a proto message"))
		}
		body, err := bridge.Marshal.Marshal(msg)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		var (
			resp connect.AnyResponse
			herr error
		)
		out := i.eng.Do(ctx, &bridge.Call{Operation: spec.Procedure, Keys: keys, Request: body, Run: func(ctx context.Context) bridge.Result {
			resp, herr = next(ctx, req)
			if herr != nil {
				return bridge.Result{Status: statusOf(herr)}
			}
			m, ok := resp.Any().(proto.Message)
			if !ok {
				return bridge.Result{Err: errors.New("response is not a proto message")}
			}
			b, err := bridge.Marshal.Marshal(m)
			return bridge.Result{Body: b, Err: err}
		}})
		switch {
		case out.Problem != nil:
			st, retry := bridge.StatusOf(out.Problem)
			e := errorOf(st)
			if retry > 0 {
				e.Meta().Set("Retry-After", strconv.FormatInt(max(int64(retry.Seconds()+0.999), 1), 10))
			}
			return nil, e
		case out.Replayed:
			if out.Status != nil {
				e := errorOf(out.Status)
				e.Meta().Set(HeaderReplayed, "true")
				return nil, e
			}
			var md protoreflect.MethodDescriptor
			if d, ok := spec.Schema.(protoreflect.MethodDescriptor); ok {
				md = d
			} else {
				// A handler built without connect.WithSchema: the generated
				// code registered the service's descriptor.
				md = bridge.Method(protoregistry.GlobalFiles, spec.Procedure)
			}
			if md == nil && strings.Contains(req.Header().Get("Content-Type"), "json") {
				// Unknown output type: the stored bytes would be replayed
				// as unknown fields, which JSON drops ({} instead of the
				// response). Refuse rather than answer something else.
				return nil, connect.NewError(connect.CodeInternal, fmt.Errorf(
					"idemconnect: %s: cannot replay the stored response as JSON: the output type is unknown (build the handler with connect.WithSchema)", spec.Procedure))
			}
			m := bridge.NewOutput(i.cfg.Types, md)
			if err := proto.Unmarshal(out.Body, m); err != nil {
				return nil, connect.NewError(connect.CodeInternal, err)
			}
			res := connect.NewResponse(&message{m})
			res.Header().Set(HeaderReplayed, "true")
			return res, nil
		}
		return resp, herr
	}
}

// message wraps a replayed message: *message is a proto.Message through
// the embedded one, whatever its concrete type.
type message struct{ proto.Message }

// statusOf is the stored form of a handler's error.
func statusOf(err error) *spb.Status {
	st := &spb.Status{Code: int32(connect.CodeOf(err)), Message: err.Error()}
	var ce *connect.Error
	if errors.As(err, &ce) {
		st.Message = ce.Message()
		for _, d := range ce.Details() {
			st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
		}
	}
	return st
}

// errorOf is the connect error of a status.
func errorOf(st *spb.Status) *connect.Error {
	e := connect.NewError(connect.Code(st.GetCode()), errors.New(st.GetMessage()))
	for _, a := range st.GetDetails() {
		if d, err := connect.NewErrorDetail(a); err == nil {
			e.AddDetail(d)
		}
	}
	return e
}

// Tx returns the call's transaction in transactional mode: idemhttp.Tx.
// The handler must not commit or roll it back.
func Tx[TTx any](ctx context.Context) (TTx, bool) { return idemhttp.Tx[TTx](ctx) }

// SQLTx is Tx[*sql.Tx], for the sqlstore driver (SQLite or PostgreSQL)
// and MySQL.
func SQLTx(ctx context.Context) (*sql.Tx, bool) { return idemhttp.SQLTx(ctx) }

// Key returns the call's idempotency key inside the handler, or "".
func Key(ctx context.Context) string { return idemhttp.Key(ctx) }

// ReasonOf returns the ErrorInfo reason of err when it is one of the
// interceptor's own errors (a Reason constant), else "".
func ReasonOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	details := make([]*anypb.Any, 0, len(ce.Details()))
	for _, d := range ce.Details() {
		details = append(details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return bridge.ReasonOf(details)
}

// retryDelayOf is the RetryInfo delay of err, or 0.
func retryDelayOf(err error) time.Duration {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0
	}
	details := make([]*anypb.Any, 0, len(ce.Details()))
	for _, dt := range ce.Details() {
		details = append(details, &anypb.Any{TypeUrl: "type.googleapis.com/" + dt.Type(), Value: dt.Bytes()})
	}
	return bridge.RetryDelayOf(details)
}
