package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindPeerDir: idem bench --peer finds the Watermill harness module
// where it lives (cmd/idem/internal/bench/peer), from anywhere in the
// source tree, and an explicit PeerDir wins.
func TestFindPeerDir(t *testing.T) {
	dir, err := findPeerDir("")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(filepath.ToSlash(dir), "cmd/idem/internal/bench/peer") {
		t.Fatalf("peer dir %s, want …/cmd/idem/internal/bench/peer", dir)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !strings.Contains(string(mod), "module github.com/idemkit/idem/cmd/idem/internal/bench/peer") {
		t.Fatalf("go.mod of %s: %v %q", dir, err, mod)
	}
	if got, err := findPeerDir("/elsewhere"); err != nil || got != "/elsewhere" {
		t.Fatalf("findPeerDir(/elsewhere) = %q, %v", got, err)
	}
}
