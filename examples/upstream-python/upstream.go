// Package upstreampython starts the example Python order service
// (server.py, embedded, standard library only) as a child process, for the
// test that puts it behind idem proxy and checks it with idem conform.
package upstreampython

import (
	"context"
	_ "embed"

	upstreamnode "github.com/idemkit/idem/examples/upstream-node"
)

// Script is the service's source (server.py).
//
//go:embed server.py
var Script []byte

// Start runs the service with python3 on 127.0.0.1 at port (0: any free
// one); errors wrap upstreamnode.ErrNotInstalled when python3 is missing.
func Start(ctx context.Context, port int) (*upstreamnode.Upstream, error) {
	return upstreamnode.StartScript(ctx, "python3", Script, "server.py", port)
}
