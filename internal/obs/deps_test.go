package obs_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The library depends on the OpenTelemetry API only: the SDK and the
// exporters belong to the command, the examples and the tests. This lists
// the dependencies of the library packages (tests excluded) and fails on
// any SDK or exporter package.
func TestLibraryHasNoOpenTelemetrySDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	pkgs := []string{"inbox", "outbox", "consumer", "idemhttp", "effect", "webhook", "idemmetrics", "dlq", "broker/jetstream"}
	args := []string{"list", "-deps"}
	for _, p := range pkgs {
		args = append(args, "github.com/idemkit/idem/"+p)
	}
	out, err := exec.Command(goTool, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	api := false
	for _, dep := range strings.Fields(string(out)) {
		if dep == "go.opentelemetry.io/otel/trace" {
			api = true
		}
		if strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(dep, "go.opentelemetry.io/otel/exporters") ||
			strings.HasPrefix(dep, "go.opentelemetry.io/proto") || strings.HasPrefix(dep, "google.golang.org/grpc") {
			t.Errorf("library package depends on %s", dep)
		}
	}
	if !api {
		t.Errorf("go.opentelemetry.io/otel/trace missing from the dependencies: the check looks at the wrong packages")
	}
}
