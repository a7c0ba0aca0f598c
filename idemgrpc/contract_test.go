package idemgrpc_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemgrpc/internal/testsvc"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

var modes = []idemhttp.Mode{idemhttp.Transactional, idemhttp.TwoPhase}

// wantCode fails t unless err has code and, when reason is not "", the
// interceptor's ErrorInfo reason.
func wantCode(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error %v: code %v, want %v", err, status.Code(err), code)
	}
	if reason != "" && idemgrpc.ReasonOf(err) != reason {
		t.Fatalf("error %v: reason %q, want %q", err, idemgrpc.ReasonOf(err), reason)
	}
}

func TestReplay(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		for _, mode := range modes {
			t.Run(mode.String(), func(t *testing.T) {
				testdb.Exec(t, d.D, `DELETE FROM orders`)
				a := &app{}
				conn := serve(t, d.D, idemgrpc.Config{Middleware: idemhttp.Config{Mode: mode}}, a, nil)
				ctx := withKey(t.Context(), "replay-"+mode.String(), "acme")
				// Maps in another insertion order marshal to the same
				// deterministic bytes: the same request.
				first := create(ctx, conn, testsvc.NewCreate("book", 2, map[string]string{"a": "1", "b": "2", "c": "3"}))
				if first.err != nil || first.replayed() {
					t.Fatalf("first call: %v (replayed %v)", first.err, first.replayed())
				}
				second := create(ctx, conn, testsvc.NewCreate("book", 2, map[string]string{"c": "3", "b": "2", "a": "1"}))
				if second.err != nil {
					t.Fatal(second.err)
				}
				if !second.replayed() {
					t.Fatalf("second call not marked replayed: header %v", second.header)
				}
				if !proto.Equal(first.order, second.order) {
					t.Fatalf("replay %v differs from the first response %v", second.order, first.order)
				}
				if n := a.Execs.Load(); n != 1 {
					t.Fatalf("handler ran %d times, want 1", n)
				}
				if n := rows(t, d.D); n != 1 {
					t.Fatalf("%d orders, want 1", n)
				}
				// Another key is another call.
				third := create(withKey(t.Context(), "replay-other-"+mode.String(), "acme"), conn, testsvc.NewCreate("book", 2, nil))
				if third.err != nil || testsvc.Int(third.order, "exec") != 2 {
					t.Fatalf("another key: %v, exec %d", third.err, testsvc.Int(third.order, "exec"))
				}
			})
		}
	})
}

// TestStoredError: an error StoreCode stores is replayed with its code,
// message and details; one it does not store (Unavailable) lets the retry
// execute, and in transactional mode leaves no row behind.
func TestStoredError(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		a := &app{}
		a.Before = func(_ context.Context, n int64, item string) error {
			switch {
			case item == "gone":
				st, _ := status.New(codes.NotFound, "no such item").WithDetails(&errdetails.ResourceInfo{ResourceType: "item", ResourceName: "gone"})
				return st.Err()
			case item == "flaky" && n == 2:
				return status.Error(codes.Unavailable, "try again")
			}
			return nil
		}
		conn := serve(t, d.D, idemgrpc.Config{}, a, nil)
		ctx := withKey(t.Context(), "k-gone", "")
		first := create(ctx, conn, testsvc.NewCreate("gone", 1, nil))
		wantCode(t, first.err, codes.NotFound, "")
		second := create(ctx, conn, testsvc.NewCreate("gone", 1, nil))
		wantCode(t, second.err, codes.NotFound, "")
		if !second.replayed() || a.Execs.Load() != 1 {
			t.Fatalf("stored NotFound: replayed %v, executions %d", second.replayed(), a.Execs.Load())
		}
		if !proto.Equal(status.Convert(first.err).Proto(), status.Convert(second.err).Proto()) {
			t.Fatalf("replayed status %v differs from %v", status.Convert(second.err).Proto(), status.Convert(first.err).Proto())
		}

		// Unavailable on the first execution of "flaky" (execution 2):
		// not stored, its insert rolled back, the retry executes.
		ctx = withKey(t.Context(), "k-flaky", "")
		wantCode(t, create(ctx, conn, testsvc.NewCreate("flaky", 1, nil)).err, codes.Unavailable, "")
		if n := rows(t, d.D); n != 0 {
			t.Fatalf("%d orders after Unavailable, want 0 (rolled back)", n)
		}
		r := create(ctx, conn, testsvc.NewCreate("flaky", 1, nil))
		if r.err != nil || r.replayed() || testsvc.Int(r.order, "exec") != 3 {
			t.Fatalf("retry after Unavailable: %v, replayed %v, exec %d", r.err, r.replayed(), testsvc.Int(r.order, "exec"))
		}
		if n := rows(t, d.D); n != 1 {
			t.Fatalf("%d orders, want 1", n)
		}
	})
}

func TestKeyReused(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		a := &app{}
		conn := serve(t, d.D, idemgrpc.Config{}, a, nil)
		ctx := withKey(t.Context(), "k-reused", "acme")
		if r := create(ctx, conn, testsvc.NewCreate("book", 1, nil)); r.err != nil {
			t.Fatal(r.err)
		}
		for _, req := range []*dynamicpb.Message{
			testsvc.NewCreate("pen", 1, nil),
			testsvc.NewCreate("book", 2, nil),
			testsvc.NewCreate("book", 1, map[string]string{"gift": "yes"}),
		} {
			wantCode(t, create(ctx, conn, req).err, codes.FailedPrecondition, idemgrpc.ReasonKeyReused)
		}
		if n := a.Execs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		// The same key in another tenant's scope is another record.
		r := create(withKey(t.Context(), "k-reused", "globex"), conn, testsvc.NewCreate("pen", 1, nil))
		if r.err != nil || r.replayed() || testsvc.Int(r.order, "exec") != 2 {
			t.Fatalf("other tenant: %v, replayed %v, exec %d", r.err, r.replayed(), testsvc.Int(r.order, "exec"))
		}
		wantCode(t, create(withKey(t.Context(), "k-reused", "nobody"), conn, testsvc.NewCreate("pen", 1, nil)).err,
			codes.Unauthenticated, idemgrpc.ReasonTenantRejected)
	})
}

func TestKeyMissing(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		a := &app{}
		conn := serve(t, d.D, idemgrpc.Config{}, a, nil)
		ctx := t.Context()
		wantCode(t, create(ctx, conn, testsvc.NewCreate("book", 1, nil)).err, codes.InvalidArgument, idemgrpc.ReasonKeyMissing)
		wantCode(t, create(withKey(ctx, "has space", ""), conn, testsvc.NewCreate("book", 1, nil)).err, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid)
		wantCode(t, create(withKey(withKey(ctx, "k1", ""), "k2", ""), conn, testsvc.NewCreate("book", 1, nil)).err, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid)
		if n := a.Execs.Load(); n != 0 {
			t.Fatalf("handler ran %d times, want 0", n)
		}
		// Get is NO_SIDE_EFFECTS: it passes through without a key.
		out := dynamicpb.NewMessage(testsvc.Order)
		if err := conn.Invoke(ctx, testsvc.Get, testsvc.NewGet("ord-1"), out); err != nil || testsvc.String(out, "id") != "ord-1" {
			t.Fatalf("Get without a key: %v, %v", err, out)
		}

		// Optional: a call without a key runs, untracked.
		opt := serve(t, d.D, idemgrpc.Config{Optional: true}, a, nil)
		if r := create(ctx, opt, testsvc.NewCreate("book", 1, nil)); r.err != nil || a.Execs.Load() != 1 {
			t.Fatalf("optional key: %v, executions %d", r.err, a.Execs.Load())
		}
		// IncludeIdempotent: Get needs a key too.
		all := serve(t, d.D, idemgrpc.Config{IncludeIdempotent: true}, a, nil)
		wantCode(t, all.Invoke(ctx, testsvc.Get, testsvc.NewGet("ord-1"), out), codes.InvalidArgument, idemgrpc.ReasonKeyMissing)
	})
}

// TestInFlight: a second call with the key while the first one holds it
// answers Aborted with RetryInfo and gRPC's pushback trailer, never runs
// the handler, and the retry once the first finished replays it. In
// two-phase mode on every store; in transactional mode where a duplicate
// waits on a lock for at most LockTimeout (on SQLite a duplicate waits for
// the writer instead and then replays: TestConcurrentSQLite).
func TestInFlight(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		for _, mode := range modes {
			t.Run(mode.String(), func(t *testing.T) {
				if mode == idemhttp.Transactional && (d.Name == "sqlite" || d.Name == "mysql") {
					t.Skip("a duplicate waits for the first call's commit and replays (TestConcurrentWaits)")
				}
				testdb.Exec(t, d.D, `DELETE FROM orders`)
				entered, release := make(chan struct{}), make(chan struct{})
				a := &app{After: func(_ context.Context, n int64) {
					if n == 1 {
						close(entered)
						<-release
					}
				}}
				cfg := idemgrpc.Config{Middleware: idemhttp.Config{Mode: mode, LockTimeout: 50 * time.Millisecond, RetryAfter: 1500 * time.Millisecond}}
				conn := serve(t, d.D, cfg, a, nil)
				ctx := withKey(t.Context(), "k-busy-"+mode.String(), "")
				firstDone := make(chan reply, 1)
				go func() { firstDone <- create(ctx, conn, testsvc.NewCreate("book", 1, nil)) }()
				waitEntered(t, entered, firstDone)
				second := create(ctx, conn, testsvc.NewCreate("book", 1, nil))
				close(release)
				first := <-firstDone
				wantCode(t, second.err, codes.Aborted, idemgrpc.ReasonInFlight)
				if d := retryDelay(second.err); d != 1500*time.Millisecond {
					t.Fatalf("RetryInfo delay %v, want 1.5s", d)
				}
				if v := second.trailer.Get("grpc-retry-pushback-ms"); len(v) != 1 || v[0] != strconv.Itoa(1500) {
					t.Fatalf("pushback trailer %v, want 1500", v)
				}
				if first.err != nil {
					t.Fatal(first.err)
				}
				third := create(ctx, conn, testsvc.NewCreate("book", 1, nil))
				if third.err != nil || !third.replayed() || !proto.Equal(third.order, first.order) {
					t.Fatalf("retry after the first finished: %v, replayed %v", third.err, third.replayed())
				}
				if n := a.Execs.Load(); n != 1 {
					t.Fatalf("handler ran %d times, want 1", n)
				}
			})
		}
	})
}

// TestConcurrentWaits: on SQLite (whose writers are serialised) and MySQL
// (whose duplicate waits on the record's row lock) in transactional mode, a
// concurrent duplicate waits for the first call's commit and replays it.
func TestConcurrentWaits(t *testing.T) {
	eachDriver(t, func(t *testing.T, dr testdb.Driver) {
		if dr.Name != "sqlite" && dr.Name != "mysql" {
			t.Skip("a duplicate waits at most LockTimeout here, then answers in flight (TestInFlight)")
		}
		concurrentWait(t, dr.D)
	})
}

func concurrentWait(t *testing.T, d store.Driver[any]) {
	entered, release := make(chan struct{}), make(chan struct{})
	a := &app{After: func(_ context.Context, n int64) {
		if n == 1 {
			close(entered)
			<-release
		}
	}}
	conn := serve(t, d, idemgrpc.Config{}, a, nil)
	ctx := withKey(t.Context(), "k-wait", "")
	firstDone, secondDone := make(chan reply, 1), make(chan reply, 1)
	go func() { firstDone <- create(ctx, conn, testsvc.NewCreate("book", 1, nil)) }()
	waitEntered(t, entered, firstDone)
	go func() { secondDone <- create(ctx, conn, testsvc.NewCreate("book", 1, nil)) }()
	close(release)
	first, second := <-firstDone, <-secondDone
	if first.err != nil || second.err != nil {
		t.Fatal(first.err, second.err)
	}
	if !proto.Equal(first.order, second.order) || a.Execs.Load() != 1 || rows(t, d) != 1 {
		t.Fatalf("executions %d, orders %d, responses %v and %v", a.Execs.Load(), rows(t, d), first.order, second.order)
	}
}

// waitEntered waits until the first call's handler blocks, or fails t
// when that call ends first.
func waitEntered(t *testing.T, entered <-chan struct{}, firstDone <-chan reply) {
	t.Helper()
	select {
	case <-entered:
	case r := <-firstDone:
		t.Fatalf("the first call ended before its handler blocked: %v (replayed %v)", r.err, r.replayed())
	}
}

func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// TestClientRetryPolicy: the client interceptor sets one key per logical
// call, and gRPC's retry policy resends it: the attempt that failed with
// Unavailable (not stored, rolled back) and the one that succeeds carry the
// same key, and one order exists.
func TestClientRetryPolicy(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		a := &app{Before: func(_ context.Context, n int64, _ string) error {
			if n == 1 {
				return status.Error(codes.Unavailable, "try again")
			}
			return nil
		}}
		const policy = `{"methodConfig": [{"name": [{"service": "idemtest.v1.Orders"}], "retryPolicy": {
			"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
			"retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`
		conn := serve(t, d.D, idemgrpc.Config{}, a, nil,
			grpc.WithDefaultServiceConfig(policy),
			grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
		r := create(t.Context(), conn, testsvc.NewCreate("book", 1, nil))
		if r.err != nil {
			t.Fatal(r.err)
		}
		keys := a.Keys()
		if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
			t.Fatalf("keys of the attempts %q, want two equal keys", keys)
		}
		if n := rows(t, d.D); n != 1 {
			t.Fatalf("%d orders, want 1", n)
		}
		// The next logical call gets a new key.
		if r := create(t.Context(), conn, testsvc.NewCreate("book", 1, nil)); r.err != nil || r.replayed() {
			t.Fatalf("second logical call: %v, replayed %v", r.err, r.replayed())
		}
		if keys := a.Keys(); len(keys) != 3 || keys[2] == keys[0] {
			t.Fatalf("keys %q: the second logical call reused the first one's key", keys)
		}
	})
}

// TestClientOwnRetry: with ClientConfig.MaxAttempts the interceptor itself
// retries an in-flight answer with the same key, waiting the RetryInfo
// delay, until the first call finished, and receives its replay.
func TestClientOwnRetry(t *testing.T) {
	d := testdb.Erase(testdb.SQLite(t))
	testdb.Exec(t, d, ordersTable)
	entered, release := make(chan struct{}), make(chan struct{})
	a := &app{After: func(_ context.Context, n int64) {
		if n == 1 {
			close(entered)
			<-release
		}
	}}
	var once bool
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		res, err := h(ctx, req)
		if status.Code(err) == codes.Aborted && !once {
			once = true // an in-flight answer went out: let the first call finish
			close(release)
		}
		return res, err
	}
	cfg := idemgrpc.Config{Middleware: idemhttp.Config{Mode: idemhttp.TwoPhase, RetryAfter: 10 * time.Millisecond}}
	conn := serve(t, d, cfg, a, []grpc.UnaryServerInterceptor{count},
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{MaxAttempts: 1000})))
	ctx := idemgrpc.WithKey(t.Context(), "k-own")
	firstDone := make(chan reply, 1)
	go func() { firstDone <- create(ctx, conn, testsvc.NewCreate("book", 1, nil)) }()
	waitEntered(t, entered, firstDone)
	second := create(ctx, conn, testsvc.NewCreate("book", 1, nil))
	first := <-firstDone
	if first.err != nil || second.err != nil {
		t.Fatal(first.err, second.err)
	}
	if !once || !second.replayed() || !proto.Equal(first.order, second.order) || a.Execs.Load() != 1 {
		t.Fatalf("aborted seen %v, replayed %v, executions %d", once, second.replayed(), a.Execs.Load())
	}
	if keys := a.Keys(); len(keys) != 1 || keys[0] != "k-own" {
		t.Fatalf("keys %q, want [k-own]", keys)
	}
}

// TestLimits: a request above MaxBodyBytes is refused before the handler;
// a response above MaxStoredBody is not recorded (its insert rolls back)
// and the call fails, so a retry executes again.
func TestLimits(t *testing.T) {
	d := testdb.Erase(testdb.SQLite(t))
	testdb.Exec(t, d, ordersTable)
	a := &app{}
	conn := serve(t, d, idemgrpc.Config{Middleware: idemhttp.Config{MaxBodyBytes: 64, MaxStoredBody: 64}}, a, nil)
	ctx := withKey(t.Context(), "k-big", "")
	wantCode(t, create(ctx, conn, testsvc.NewCreate(strings.Repeat("x", 100), 1, nil)).err, codes.ResourceExhausted, idemgrpc.ReasonRequestTooLarge)
	if n := a.Execs.Load(); n != 0 {
		t.Fatalf("handler ran %d times for a request above the limit", n)
	}
	// The request fits (54 bytes), its response (item, id and key: 68)
	// does not.
	item := strings.Repeat("y", 50)
	wantCode(t, create(ctx, conn, testsvc.NewCreate(item, 1, nil)).err, codes.ResourceExhausted, idemgrpc.ReasonResponseTooLarge)
	if a.Execs.Load() != 1 || rows(t, d) != 0 {
		t.Fatalf("executions %d, orders %d: want 1 execution rolled back", a.Execs.Load(), rows(t, d))
	}
	wantCode(t, create(ctx, conn, testsvc.NewCreate(item, 1, nil)).err, codes.ResourceExhausted, idemgrpc.ReasonResponseTooLarge)
	if a.Execs.Load() != 2 {
		t.Fatalf("the retry did not execute again: %d executions", a.Execs.Load())
	}
}
