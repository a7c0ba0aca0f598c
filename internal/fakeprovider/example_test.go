package fakeprovider_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/fakeprovider"
)

// The provider performs the effect, then times out; the client retries with
// the same Idempotency-Key and receives the stored answer: one e-mail sent.
func Example() {
	p := fakeprovider.New(fakeprovider.Config{})
	if err := p.Start(); err != nil {
		panic(err)
	}
	defer p.Close()

	c := fakeprovider.NewClient(p.URL())
	c.Timeout = 300 * time.Millisecond
	p.TimeoutAfterEffect(1)

	ctx := context.Background()
	_, err := c.Send(ctx, "order-confirmed-email:42", []byte(`{"to":"ana@example.com"}`))
	fmt.Println("first call failed:", err != nil)
	c.Timeout = 10 * time.Second
	res, _ := c.Send(ctx, "order-confirmed-email:42", []byte(`{"to":"ana@example.com"}`))
	fmt.Println(string(res))
	fmt.Println("raw calls:", p.Calls(), "unique effects:", p.UniqueEffects())
	// Output:
	// first call failed: true
	// {"id":"em_1","key":"order-confirmed-email:42","status":"sent"}
	// raw calls: 2 unique effects: 1
}
