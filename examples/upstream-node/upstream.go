// Package upstreamnode starts the example Node.js order service
// (server.js, embedded) as a child process, for tests and benchmarks that
// need a real non-Go upstream behind "idem proxy". The service counts its
// executions; [Upstream.Count] reads them.
package upstreamnode

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Script is the service's source (server.js).
//
//go:embed server.js
var Script []byte

// ErrNotInstalled reports that a script's interpreter is not on PATH.
var ErrNotInstalled = errors.New("upstreamnode: interpreter is not on PATH")

// ErrNoNode reports that the node executable is not on PATH; it wraps
// ErrNotInstalled.
var ErrNoNode = fmt.Errorf("%w: node", ErrNotInstalled)

// Upstream is one running service.
type Upstream struct {
	// URL is the service's base URL, e.g. http://127.0.0.1:41234.
	URL string
	cmd *exec.Cmd
	dir string
	// exited is closed when the process has ended.
	exited chan struct{}
}

// Node returns the path of the node executable, or ErrNoNode.
func Node() (string, error) {
	p, err := exec.LookPath("node")
	if err != nil {
		return "", ErrNoNode
	}
	return p, nil
}

// Start runs the service on 127.0.0.1 at port (0 picks a free one) and
// waits until it listens. The process ends with ctx or with Stop.
func Start(ctx context.Context, port int) (*Upstream, error) {
	if _, err := Node(); err != nil {
		return nil, err
	}
	return StartScript(ctx, "node", Script, "server.js", port)
}

// StartScript runs script (saved as name in a private temporary
// directory) with interpreter, passing port as its argument, and waits for
// its first output line "listening on http://HOST:PORT". The other
// examples' services (examples/upstream-python) start through it.
func StartScript(ctx context.Context, interpreter string, script []byte, name string, port int) (*Upstream, error) {
	bin, err := exec.LookPath(interpreter)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotInstalled, interpreter)
	}
	dir, err := os.MkdirTemp("", "idem-upstream-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, script, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, path, fmt.Sprint(port))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	u := &Upstream{cmd: cmd, dir: dir, exited: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
			}
		}
		if first {
			close(lines)
		}
	}()
	go func() { _ = cmd.Wait(); close(u.exited) }()
	select {
	case line, ok := <-lines:
		if !ok || !strings.HasPrefix(line, "listening on ") {
			u.Kill()
			return nil, fmt.Errorf("upstreamnode: unexpected first line %q", line)
		}
		u.URL = strings.TrimPrefix(line, "listening on ")
	case <-time.After(30 * time.Second):
		u.Kill()
		return nil, errors.New("upstreamnode: the service did not start within 30s")
	}
	return u, nil
}

// Counts is the service's execution count.
type Counts struct {
	Executions int            `json:"executions"`
	ByKey      map[string]int `json:"by_key"`
}

// Count reads GET /count.
func (u *Upstream) Count(ctx context.Context) (Counts, error) {
	var c Counts
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.URL+"/count", nil)
	if err != nil {
		return c, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("upstreamnode: GET /count: %s", resp.Status)
	}
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

// Kill ends the process with SIGKILL (a crash: open connections break)
// and waits for it.
func (u *Upstream) Kill() {
	_ = u.cmd.Process.Kill()
	<-u.exited
	os.RemoveAll(u.dir)
}

// Stop ends the process gracefully (SIGTERM), or kills it after 5s.
func (u *Upstream) Stop() {
	_ = u.cmd.Process.Signal(os.Interrupt)
	select {
	case <-u.exited:
	case <-time.After(5 * time.Second):
		_ = u.cmd.Process.Kill()
		<-u.exited
	}
	os.RemoveAll(u.dir)
}
