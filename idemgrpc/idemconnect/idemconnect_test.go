package idemconnect_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemkit/idem/idemgrpc/idemconnect"
	"github.com/idemkit/idem/idemgrpc/internal/testsvc"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

func eachDriver(t *testing.T, body func(t *testing.T, d testdb.Driver)) {
	t.Helper()
	testsvc.EachDriver(t, body, testsvc.Extra{Name: "mysql", Open: func(t testing.TB) store.Driver[any] {
		return testdb.Erase(idemmysqltest.Open(t))
	}})
}

type orders = *connect.Client[dynamicpb.Message, dynamicpb.Message]

// tenantHeader is the tests' Config.Tenant: the X-Tenant request header.
func tenantHeader(ctx context.Context) (string, error) {
	ci, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return "", errors.New("no call info")
	}
	if t := ci.RequestHeader().Get("X-Tenant"); t != "nobody" {
		return t, nil
	}
	return "", errors.New("unknown tenant")
}

// serve starts a connect-go server (HTTP/2 over TLS on loopback, so the
// Connect, gRPC and gRPC-Web protocols all work) with the interceptor in
// front of a, and returns the base URL and its HTTP client.
func serve(t *testing.T, d store.Driver[any], cfg idemconnect.Config, a *testsvc.App, outer ...connect.Interceptor) (string, *http.Client) {
	t.Helper()
	if cfg.Tenant == nil {
		cfg.Tenant = tenantHeader
	}
	ic, err := idemconnect.NewInterceptor(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.D = d
	mux := http.NewServeMux()
	for path, h := range testsvc.Connect(a, connect.WithInterceptors(append(outer, ic)...)) {
		mux.Handle(path, h)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, srv.Client()
}

type reply struct {
	res *connect.Response[dynamicpb.Message]
	err error
}

func (r reply) replayed() bool {
	return r.res != nil && r.res.Header().Get(idemconnect.HeaderReplayed) == "true"
}

func (r reply) order() *dynamicpb.Message {
	if r.res == nil {
		return nil
	}
	return r.res.Msg
}

func call(ctx context.Context, c orders, key, tenant string, msg *dynamicpb.Message) reply {
	req := connect.NewRequest(msg)
	if key != "" {
		req.Header().Set(idemconnect.HeaderKey, key)
	}
	if tenant != "" {
		req.Header().Set("X-Tenant", tenant)
	}
	res, err := c.CallUnary(ctx, req)
	return reply{res, err}
}

func wantCode(t *testing.T, err error, code connect.Code, reason string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("error %v: code %v, want %v", err, connect.CodeOf(err), code)
	}
	if reason != "" && idemconnect.ReasonOf(err) != reason {
		t.Fatalf("error %v: reason %q, want %q", err, idemconnect.ReasonOf(err), reason)
	}
}

var protocols = map[string][]connect.ClientOption{
	"connect":      nil,
	"connect-json": {connect.WithProtoJSON()},
	"grpc":         {connect.WithGRPC()},
	"grpc-web":     {connect.WithGRPCWeb()},
}

// TestReplay: in every protocol and codec, a retry with the key gets the
// stored response with Idempotent-Replayed, and the handler runs once;
// the same message sent as JSON after binary proto is the same request.
func TestReplay(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		a := &testsvc.App{}
		url, hc := serve(t, d.D, idemconnect.Config{}, a)
		for name, opts := range protocols {
			create, _ := testsvc.ConnectClients(hc, url, opts...)
			key := "k-" + name
			first := call(t.Context(), create, key, "acme", testsvc.NewCreate("book", 2, map[string]string{"a": "1", "b": "2"}))
			if first.err != nil || first.replayed() {
				t.Fatalf("%s: first call: %v (replayed %v)", name, first.err, first.replayed())
			}
			second := call(t.Context(), create, key, "acme", testsvc.NewCreate("book", 2, map[string]string{"b": "2", "a": "1"}))
			if second.err != nil || !second.replayed() || !proto.Equal(first.order(), second.order()) {
				t.Fatalf("%s: retry: %v, replayed %v, %v vs %v", name, second.err, second.replayed(), second.order(), first.order())
			}
		}
		if n := a.Execs.Load(); n != int64(len(protocols)) {
			t.Fatalf("handler ran %d times, want %d", n, len(protocols))
		}
		// One message, two codecs: binary proto first, JSON replays it.
		bin, _ := testsvc.ConnectClients(hc, url)
		json, _ := testsvc.ConnectClients(hc, url, connect.WithProtoJSON())
		first := call(t.Context(), bin, "k-codecs", "acme", testsvc.NewCreate("pen", 1, nil))
		second := call(t.Context(), json, "k-codecs", "acme", testsvc.NewCreate("pen", 1, nil))
		if first.err != nil || second.err != nil || !second.replayed() || !proto.Equal(first.order(), second.order()) {
			t.Fatalf("JSON after binary: %v, %v, replayed %v", first.err, second.err, second.replayed())
		}
		if n := testsvc.Rows(t, d.D); n != len(protocols)+1 {
			t.Fatalf("%d orders, want %d", n, len(protocols)+1)
		}
	})
}

func TestContract(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		a := &testsvc.App{Before: func(_ context.Context, _ int64, item string) error {
			if item == "gone" {
				e := connect.NewError(connect.CodeNotFound, errors.New("no such item"))
				if det, err := connect.NewErrorDetail(&errdetails.ResourceInfo{ResourceType: "item", ResourceName: "gone"}); err == nil {
					e.AddDetail(det)
				}
				return e
			}
			return nil
		}}
		url, hc := serve(t, d.D, idemconnect.Config{}, a)
		create, get := testsvc.ConnectClients(hc, url)
		ctx := t.Context()

		// Key reused with another request.
		if r := call(ctx, create, "k1", "acme", testsvc.NewCreate("book", 1, nil)); r.err != nil {
			t.Fatal(r.err)
		}
		wantCode(t, call(ctx, create, "k1", "acme", testsvc.NewCreate("pen", 1, nil)).err, connect.CodeFailedPrecondition, idemconnect.ReasonKeyReused)
		// The same key in another tenant's scope is another record.
		if r := call(ctx, create, "k1", "globex", testsvc.NewCreate("pen", 1, nil)); r.err != nil || r.replayed() {
			t.Fatalf("other tenant: %v, replayed %v", r.err, r.replayed())
		}
		wantCode(t, call(ctx, create, "k1", "nobody", testsvc.NewCreate("pen", 1, nil)).err, connect.CodeUnauthenticated, idemconnect.ReasonTenantRejected)

		// Missing and malformed keys.
		wantCode(t, call(ctx, create, "", "acme", testsvc.NewCreate("book", 1, nil)).err, connect.CodeInvalidArgument, idemconnect.ReasonKeyMissing)
		wantCode(t, call(ctx, create, "bad key", "acme", testsvc.NewCreate("book", 1, nil)).err, connect.CodeInvalidArgument, idemconnect.ReasonKeyInvalid)
		if n := a.Execs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
		// Get is NO_SIDE_EFFECTS: no key needed.
		if r, err := get.CallUnary(ctx, connect.NewRequest(testsvc.NewGet("ord-1"))); err != nil || testsvc.String(r.Msg, "id") != "ord-1" {
			t.Fatalf("Get without a key: %v", err)
		}

		// A stored error is replayed with its code, message and details.
		first := call(ctx, create, "k-gone", "acme", testsvc.NewCreate("gone", 1, nil))
		second := call(ctx, create, "k-gone", "acme", testsvc.NewCreate("gone", 1, nil))
		wantCode(t, first.err, connect.CodeNotFound, "")
		wantCode(t, second.err, connect.CodeNotFound, "")
		var ce *connect.Error
		if !errors.As(second.err, &ce) || ce.Meta().Get(idemconnect.HeaderReplayed) != "true" || ce.Message() != "no such item" || len(ce.Details()) != 1 {
			t.Fatalf("replayed error %v: meta %v", second.err, ce.Meta())
		}
		if n := a.Execs.Load(); n != 3 {
			t.Fatalf("handler ran %d times, want 3", n)
		}
	})
}

// TestInFlight: a second call with the key while the first holds it
// answers Aborted with RetryInfo (two-phase mode, on every store); the
// client interceptor's own attempts then retry it with the same key until
// the first finished and replay its response.
func TestInFlight(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		entered, release := make(chan struct{}), make(chan struct{})
		a := &testsvc.App{After: func(_ context.Context, n int64) {
			if n == 1 {
				close(entered)
				<-release
			}
		}}
		released := false
		outer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				res, err := next(ctx, req)
				if connect.CodeOf(err) == connect.CodeAborted && req.Header().Get("X-Release") != "" && !released {
					released = true
					close(release)
				}
				return res, err
			}
		})
		cfg := idemconnect.Config{Middleware: idemhttp.Config{Mode: idemhttp.TwoPhase, RetryAfter: 20 * time.Millisecond}}
		url, hc := serve(t, d.D, cfg, a, outer)
		create, _ := testsvc.ConnectClients(hc, url)
		firstDone := make(chan reply, 1)
		go func() { firstDone <- call(t.Context(), create, "k-busy", "", testsvc.NewCreate("book", 1, nil)) }()
		select {
		case <-entered:
		case r := <-firstDone:
			t.Fatalf("the first call ended before its handler blocked: %v", r.err)
		}
		busy := call(t.Context(), create, "k-busy", "", testsvc.NewCreate("book", 1, nil))
		wantCode(t, busy.err, connect.CodeAborted, idemconnect.ReasonInFlight)

		// The client interceptor retries (and the outer interceptor lets
		// the first call finish after one more in-flight answer).
		retrying, _ := testsvc.ConnectClients(hc, url, connect.WithInterceptors(
			idemconnect.NewClientInterceptor(idemconnect.ClientConfig{MaxAttempts: 1000})))
		ctx := idemconnect.WithKey(t.Context(), "k-busy")
		req := connect.NewRequest(testsvc.NewCreate("book", 1, nil))
		req.Header().Set("X-Release", "1")
		res, err := retrying.CallUnary(ctx, req)
		first := <-firstDone
		if err != nil || first.err != nil {
			t.Fatal(err, first.err)
		}
		if !released || res.Header().Get(idemconnect.HeaderReplayed) != "true" || !proto.Equal(res.Msg, first.order()) {
			t.Fatalf("released %v, replayed %q", released, res.Header().Get(idemconnect.HeaderReplayed))
		}
		if n := a.Execs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		if keys := a.Keys(); len(keys) != 1 || keys[0] != "k-busy" {
			t.Fatalf("keys %q", keys)
		}
	})
}

// TestClientKey: the client interceptor sets a fresh key per logical call
// and keeps it across its own attempts: the attempt that failed with
// Unavailable (not stored, rolled back) and the one that succeeded carry
// the same key, and one order exists.
func TestClientKey(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		a := &testsvc.App{Before: func(_ context.Context, n int64, _ string) error {
			if n == 1 {
				return connect.NewError(connect.CodeUnavailable, errors.New("try again"))
			}
			return nil
		}}
		url, hc := serve(t, d.D, idemconnect.Config{}, a)
		create, _ := testsvc.ConnectClients(hc, url, connect.WithInterceptors(
			idemconnect.NewClientInterceptor(idemconnect.ClientConfig{MaxAttempts: 3, Backoff: time.Millisecond})))
		for range 2 {
			if _, err := create.CallUnary(t.Context(), connect.NewRequest(testsvc.NewCreate("book", 1, nil))); err != nil {
				t.Fatal(err)
			}
		}
		keys := a.Keys()
		if len(keys) != 3 || keys[0] == "" || keys[0] != keys[1] || keys[2] == keys[0] {
			t.Fatalf("keys %q: want the first call's two attempts on one key, the second call on another", keys)
		}
		if n := testsvc.Rows(t, d.D); n != 2 {
			t.Fatalf("%d orders, want 2", n)
		}
	})
}

// A handler built without connect.WithSchema replays its stored response
// whole to a JSON client: the interceptor finds the output type in
// protoregistry.GlobalFiles. Before, it replayed the bytes as unknown
// fields of an empty message, which JSON drops: the client got {}.
func TestReplayWithoutSchemaAsJSON(t *testing.T) {
	d := testdb.Erase(testdb.SQLite(t))
	testdb.Exec(t, d, testsvc.OrdersTable)
	ic, err := idemconnect.NewInterceptor(d, idemconnect.Config{Tenant: tenantHeader})
	if err != nil {
		t.Fatal(err)
	}
	a := &testsvc.App{D: d}
	mux := http.NewServeMux()
	path, h := testsvc.ConnectWithoutSchema(a, connect.WithInterceptors(ic))
	mux.Handle(path, h)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	create, _ := testsvc.ConnectClients(srv.Client(), srv.URL, connect.WithProtoJSON())
	first := call(t.Context(), create, "k-json", "acme", testsvc.NewCreate("pen", 3, nil))
	second := call(t.Context(), create, "k-json", "acme", testsvc.NewCreate("pen", 3, nil))
	if first.err != nil || second.err != nil || !second.replayed() {
		t.Fatalf("calls: %v, %v, replayed %v", first.err, second.err, second.replayed())
	}
	if !proto.Equal(first.order(), second.order()) || testsvc.String(second.order(), "item") != "pen" {
		t.Fatalf("replayed %v, want %v", second.order(), first.order())
	}
}
