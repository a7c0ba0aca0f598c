// Package idemgrpc gives gRPC unary methods the Idempotency-Key contract
// of package idemhttp: a retried call with the same key never runs the
// handler twice, its stored response (or stored error) is replayed, and in
// transactional mode the handler's writes and the key record commit in
// one transaction — on every store idemhttp supports.
//
//	d, err := sqlstore.OpenSQLite("orders.db", sqlstore.SQLiteConfig{}, sqlstore.Config{}) // or pgxstore.Open: pgx.Tx
//	if err := migrate.Up(ctx, d); err != nil { … }
//	idem, err := idemgrpc.UnaryServerInterceptor(d, idemgrpc.Config{Tenant: tenantOf}) // func(ctx) (string, error)
//	if err != nil { … }
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth, idem))
//
//	func (s *orders) Create(ctx context.Context, in *pb.CreateRequest) (*pb.Order, error) {
//		tx, _ := idemgrpc.SQLTx(ctx) // the key's transaction: never commit it
//		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, item) VALUES (?, ?)`, id, in.Item); err != nil {
//			return nil, status.Error(codes.Unavailable, "try again") // not stored: rolled back
//		}
//		return &pb.Order{Id: id}, nil // stored; a retry with the key replays it
//	}
//
//	conn, err := grpc.NewClient(addr, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
//
// The key travels in the "idempotency-key" metadata (the syntax of the
// HTTP header: 1 to 255 visible ASCII characters, bare or quoted). Its
// scope is the tenant (Config.Tenant, from the call's context: the
// authenticated principal an earlier interceptor put there, or metadata)
// plus the operation, the full method name ("/pkg.Service/Method"). The
// fingerprint covers the full method and the request message marshalled
// deterministically, so a retry must send the same message (maps in any
// order); unknown fields count as sent.
//
// Answers, as gRPC codes (each error carries a google.rpc.ErrorInfo of
// domain "github.com/idemkit/idem" whose reason is one of the Reason
// constants; see ReasonOf):
//
//	first call with a new key       handler runs; its response, or its error when
//	                                Config.StoreCode stores it, is stored with the record
//	retry, same request, completed  stored response or stored error; header metadata
//	                                "idempotent-replayed: true"; handler not run
//	same key, another request       FailedPrecondition (ReasonKeyReused)
//	same key still executing        Aborted (ReasonInFlight) with RetryInfo and the
//	                                trailer grpc-retry-pushback-ms (or, with
//	                                Middleware.WaitForInFlight, wait and replay)
//	key missing                     InvalidArgument (ReasonKeyMissing) unless Config.Optional
//	key malformed, several keys     InvalidArgument (ReasonKeyInvalid)
//	Config.Tenant fails             Unauthenticated (ReasonTenantRejected)
//	request above MaxBodyBytes      ResourceExhausted (ReasonRequestTooLarge)
//	response above MaxStoredBody    ResourceExhausted (ReasonResponseTooLarge); nothing recorded
//	two-phase lease lost            Aborted (ReasonLeaseLost) with RetryInfo
//	key held for reconciliation     FailedPrecondition (ReasonNeedsReconciliation)
//	key store failing, commit fails Unavailable (ReasonStoreUnavailable) with RetryInfo
//	NO_SIDE_EFFECTS or IDEMPOTENT   pass through untouched (unless Config.IncludeIdempotent)
//
// Why these codes. A key reused with another request is refused because
// of state the server holds (an earlier call with that key), not because
// the request is malformed on its own, so it is FailedPrecondition — the
// code of HTTP's 412, which payment APIs answer for an idempotency
// violation — rather than InvalidArgument, and a client must not retry it
// unchanged. A key in flight is a concurrency conflict on one key: Aborted,
// the code of HTTP's 409 and of "retry the whole call", not Unavailable,
// which says the server is down (it feeds health checks, outlier detection
// and alerts) and which stays reserved for a failing key store. A missing
// or malformed key is wrong whatever the server's state: InvalidArgument.
// Add ABORTED to a retry policy's retryableStatusCodes (gRPC retries carry
// the same metadata, so the same key) or use ClientConfig.MaxAttempts.
//
// The interceptor drives an idemhttp.Middleware (Config.Middleware) with a
// synthesized request: POST, path = the full method, body = the request's
// deterministic proto bytes, Content-Type application/grpc+proto. So every
// guarantee of idemhttp holds as documented there: the primary key decides
// every execution, also across instances; Transactional mode (the default)
// commits the handler's writes through Tx or SQLTx together with the
// record, and a crash, a panic or an error that is not stored leaves
// nothing; TwoPhase mode leases the key; records expire after Retention;
// "idem keys show" finds a record under the full method as operation. A
// stored error shows there with status 200 and its code in Grpc-Status.
//
// The handler runs with the call's own context (metadata, peer, deadline)
// plus idemhttp's state, so Tx, SQLTx, Key and idemhttp.SetResource work
// in it. A replay returns the stored message as a new value of the
// method's output type (generated code registers it; Config.Files and
// Config.Types name other registries; a method found nowhere is replayed
// as an emptypb.Empty whose unknown fields hold the stored bytes, which the
// proto codec sends unchanged). Header or trailer metadata that the handler
// set is not stored, only the message or the status with its details.
// Streaming methods are not handled.
package idemgrpc

import (
	"context"
	"database/sql"
	"strconv"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idem/idemgrpc/internal/bridge"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// MetadataKey is the metadata key carrying the idempotency key.
const MetadataKey = "idempotency-key"

// MetadataReplayed is the header metadata set to "true" on a replay.
const MetadataReplayed = "idempotent-replayed"

// Domain is the ErrorInfo domain of the interceptor's own errors.
const Domain = bridge.Domain

// The ErrorInfo reasons of the interceptor's own errors (see the package
// documentation for their codes).
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

// Defaults of Config.Middleware's limits: gRPC's default largest received
// message.
const (
	DefaultMaxRequestBytes  = bridge.DefaultMaxRequestBytes
	DefaultMaxResponseBytes = bridge.DefaultMaxResponseBytes
)

// Config configures UnaryServerInterceptor. The zero value is usable:
// transactional mode, one shared tenant, key required on every method
// that does not declare itself NO_SIDE_EFFECTS or IDEMPOTENT. The health
// checking, reflection and channelz services (grpc.health.v1,
// grpc.reflection.*, grpc.channelz.*) always pass through without a key.
type Config struct {
	// Tenant returns the tenant that scopes the key, typically the
	// principal an authentication interceptor placed in the context. An
	// error answers Unauthenticated. Defaults to one shared tenant "" — set
	// it in any service with more than one client.
	Tenant func(ctx context.Context) (string, error)

	// Optional lets calls without a key pass through untouched. Defaults
	// to false: InvalidArgument.
	Optional bool

	// IncludeIdempotent handles methods whose idempotency_level is
	// NO_SIDE_EFFECTS or IDEMPOTENT too; by default they pass through, as
	// safe HTTP methods do.
	IncludeIdempotent bool

	// StoreCode reports whether a handler's error with this code is
	// stored and replayed (and, in transactional mode, its writes
	// committed). A successful call is always stored. Defaults to
	// DefaultStoreCode.
	StoreCode func(codes.Code) bool

	// Files finds the method descriptors (idempotency level, output type).
	// Defaults to protoregistry.GlobalFiles, where generated code registers.
	Files *protoregistry.Files
	// Types finds the generated output types of replays. Defaults to
	// protoregistry.GlobalTypes; a type found in neither is replayed as a
	// dynamicpb message.
	Types *protoregistry.Types

	// Middleware configures the idemhttp.Middleware behind the
	// interceptor: Mode, Retention, OperationRetention, LockTimeout, Lease,
	// WaitForInFlight, RetryAfter, ExpiredPolicy, Now, Logger,
	// TracerProvider, MaxResponseMemory, SpillDir as documented there.
	// MaxBodyBytes caps the request's marshalled size (defaults to
	// DefaultMaxRequestBytes) and MaxStoredBody the response's (defaults
	// to DefaultMaxResponseBytes; MaxResponseBytes is set to it, as a
	// response is stored whole or not at all). Tenant, Operation,
	// Optional, StoreStatus, ReplayHeaders, ErrorHandler,
	// FingerprintHeaders, ExcludeFields and ExcludeQuery are set by this
	// package.
	Middleware idemhttp.Config
}

// DefaultStoreCode stores NotFound and AlreadyExists, the definite
// answers among the errors. The others are not stored (in transactional
// mode the handler's writes roll back) and a retry executes again:
// InvalidArgument, FailedPrecondition, OutOfRange, PermissionDenied,
// Unauthenticated, ResourceExhausted and Aborted, like HTTP's 400, 401,
// 403, 409 and 429 in idemhttp.DefaultStoreStatus, mean the request did
// not take effect and may be corrected under the same key; the others are
// failures (HTTP's 5xx).
func DefaultStoreCode(c codes.Code) bool { return bridge.DefaultStoreCode(int32(c)) }

// UnaryServerInterceptor returns the interceptor storing its records
// through d. It fails as idemhttp.New does (configuration errors wrap
// idem.ErrInvalidOption; an unmigrated database wraps
// migrate.ErrNotMigrated).
func UnaryServerInterceptor[TTx any](d store.Driver[TTx], cfg Config) (grpc.UnaryServerInterceptor, error) {
	storeCode := cfg.StoreCode
	if storeCode == nil {
		storeCode = DefaultStoreCode
	}
	eng, err := bridge.New(d, bridge.Options{
		Tenant:    cfg.Tenant,
		StoreCode: func(c int32) bool { return storeCode(codes.Code(c)) },
		HTTP:      cfg.Middleware,
	})
	if err != nil {
		return nil, err
	}
	s := &server{eng: eng, cfg: cfg}
	return s.intercept, nil
}

type server struct {
	eng     *bridge.Engine
	cfg     Config
	methods sync.Map // full method → protoreflect.MethodDescriptor (nil when unknown)
}

func (s *server) method(full string) protoreflect.MethodDescriptor {
	if v, ok := s.methods.Load(full); ok {
		md, _ := v.(protoreflect.MethodDescriptor)
		return md
	}
	md := bridge.Method(s.cfg.Files, full)
	s.methods.Store(full, md)
	return md
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if bridge.InfrastructureMethod(info.FullMethod) {
		return handler(ctx, req) // health checks, reflection, channelz
	}
	md := s.method(info.FullMethod)
	if !s.cfg.IncludeIdempotent && bridge.SafeMethod(md) {
		return handler(ctx, req)
	}
	in, _ := metadata.FromIncomingContext(ctx)
	keys := in.Get(MetadataKey)
	if len(keys) == 0 && s.cfg.Optional {
		return handler(ctx, req)
	}
	msg := protoMessage(req)
	if msg == nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: %s: request %T is not a proto message", info.FullMethod, req)
	}
	body, err := bridge.Marshal.Marshal(msg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: %s: marshal request: %v", info.FullMethod, err)
	}
	var (
		resp any
		herr error
	)
	out := s.eng.Do(ctx, &bridge.Call{Operation: info.FullMethod, Keys: keys, Request: body, Run: func(ctx context.Context) bridge.Result {
		resp, herr = handler(ctx, req)
		if herr != nil {
			return bridge.Result{Status: status.Convert(herr).Proto()}
		}
		m := protoMessage(resp)
		if m == nil {
			return bridge.Result{Err: status.Errorf(codes.Internal, "response %T is not a proto message", resp)}
		}
		b, err := bridge.Marshal.Marshal(m)
		return bridge.Result{Body: b, Err: err}
	}})
	switch {
	case out.Problem != nil:
		st, retry := bridge.StatusOf(out.Problem)
		if retry > 0 {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(retry.Milliseconds(), 10)))
		}
		return nil, status.ErrorProto(st)
	case out.Replayed:
		_ = grpc.SetHeader(ctx, metadata.Pairs(MetadataReplayed, "true"))
		if out.Status != nil {
			return nil, status.ErrorProto(out.Status)
		}
		m := bridge.NewOutput(s.cfg.Types, md)
		if err := proto.Unmarshal(out.Body, m); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: %s: stored response does not decode: %v", info.FullMethod, err)
		}
		return m, nil
	}
	return resp, herr
}

// protoMessage returns v as a proto message (also a legacy one), or nil.
func protoMessage(v any) proto.Message {
	switch m := v.(type) {
	case proto.Message:
		return m
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m)
	}
	return nil
}

// Tx returns the call's transaction in transactional mode: idemhttp.Tx.
// TTx is the driver's transaction type (pgx.Tx for pgxstore, *sql.Tx for
// sqlstore and MySQL). The handler must not commit or roll it back.
func Tx[TTx any](ctx context.Context) (TTx, bool) { return idemhttp.Tx[TTx](ctx) }

// SQLTx is Tx[*sql.Tx], for the sqlstore driver (SQLite or PostgreSQL)
// and MySQL.
func SQLTx(ctx context.Context) (*sql.Tx, bool) { return idemhttp.SQLTx(ctx) }

// Key returns the call's idempotency key inside the handler, or "".
func Key(ctx context.Context) string { return idemhttp.Key(ctx) }

// ReasonOf returns the ErrorInfo reason of err when it is one of the
// interceptor's own errors (a Reason constant), else "".
func ReasonOf(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	return bridge.ReasonOf(st.Proto().GetDetails())
}

// statusProto is used by the client to read RetryInfo.
func statusProto(err error) *spb.Status {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	return st.Proto()
}
