package upstreamnode_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	upstreamnode "github.com/idemkit/idem/examples/upstream-node"
)

// The service counts every POST /orders it receives, per key.
func TestUpstreamCountsExecutions(t *testing.T) {
	ctx := context.Background()
	u := upstreamnode.StartTest(t, 0)
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, u.URL+"/orders", strings.NewReader(`{"sku":"a"}`))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d, want 201", resp.StatusCode)
		}
	}
	c, err := u.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Executions != 2 || c.ByKey["k1"] != 2 {
		t.Fatalf("counts %+v, want 2 executions of k1", c)
	}
}
