package consumer_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Importing consumer does not link Prometheus: metrics attach through
// idem.Observer (Config.Observer), which *idemmetrics.Metrics implements.
func TestConsumerDoesNotLinkPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/idemkit/idem/consumer").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(strings.ToLower(dep), "prometheus") || dep == "github.com/idemkit/idem/idemmetrics" {
			t.Errorf("consumer depends on %s", dep)
		}
	}
}
