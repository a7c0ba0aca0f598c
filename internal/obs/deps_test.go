package obs_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// goTool returns the path of the go command.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// goList runs go list with args and returns its output fields.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command(goTool(), append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// sdkOrExporter reports whether dep is a package of the OpenTelemetry SDK
// or of an exporter.
func sdkOrExporter(dep string) bool {
	return strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(dep, "go.opentelemetry.io/otel/exporters")
}

// The library depends on the OpenTelemetry API only: the SDK and the
// exporters belong to the command and the examples (modules of their own). This lists the
// dependencies of the library packages (tests excluded) and fails on any
// SDK, exporter or gRPC package, or on the test recorder spantest.
func TestLibraryHasNoOpenTelemetrySDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	pkgs := []string{"inbox", "outbox", "consumer", "idemhttp", "effect", "webhook", "idemmetrics", "dlq", "broker/memory"}
	args := []string{"-deps"}
	for _, p := range pkgs {
		args = append(args, "github.com/idemkit/idem/"+p)
	}
	api := false
	for _, dep := range goList(t, args...) {
		if dep == "go.opentelemetry.io/otel/trace" {
			api = true
		}
		if sdkOrExporter(dep) || strings.HasPrefix(dep, "go.opentelemetry.io/proto") || strings.HasPrefix(dep, "google.golang.org/grpc") ||
			dep == "github.com/idemkit/idem/internal/obs/spantest" {
			t.Errorf("library package depends on %s", dep)
		}
	}
	if !api {
		t.Errorf("go.opentelemetry.io/otel/trace missing from the dependencies: the check looks at the wrong packages")
	}
}

// Nor does the core module need the SDK for its tests: they record spans
// with spantest. Its go.mod requires no SDK or exporter module, and no
// package of the module, tests included, imports one. The command and
// the examples, which use the SDK, are modules of their own (their
// packages, matched by the pattern through the workspace, are left out).
func TestCoreModuleHasNoOpenTelemetrySDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const core = "github.com/idemkit/idem"
	var mod struct{ Require []struct{ Path string } }
	out, err := exec.Command(goTool(), "mod", "edit", "-json", "../../go.mod").Output()
	if err != nil {
		t.Fatalf("go mod edit: %v", err)
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	if len(mod.Require) == 0 {
		t.Fatalf("../../go.mod requires nothing: the check reads the wrong go.mod")
	}
	for _, r := range mod.Require {
		if sdkOrExporter(r.Path) {
			t.Errorf("the core module requires %s", r.Path)
		}
	}

	fields := goList(t, "-f", "{{if .Module}}{{.Module.Path}}{{end}} {{.ImportPath}}", core+"/...")
	var pkgs []string
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == core {
			pkgs = append(pkgs, fields[i+1])
		}
	}
	if !slices.Contains(pkgs, core+"/idemhttp") || !slices.Contains(pkgs, core+"/internal/obs") {
		t.Fatalf("core packages %v: the check looks at the wrong packages", pkgs)
	}
	spantest := false
	for _, dep := range goList(t, append([]string{"-deps", "-test"}, pkgs...)...) {
		if sdkOrExporter(dep) {
			t.Errorf("a core package or its tests depend on %s", dep)
		}
		spantest = spantest || strings.HasPrefix(dep, core+"/internal/obs/spantest")
	}
	if !spantest {
		t.Errorf("spantest missing from the test dependencies: the check looks at the wrong packages")
	}
}
