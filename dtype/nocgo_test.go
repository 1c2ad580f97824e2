package dtype_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestPurePackagesBuildWithoutCgo: every package that does not bind a C
// library (ONNX Runtime, libjpeg-turbo, NVML) nor import one that does
// builds with CGO_ENABLED=0, without ONNX Runtime's headers: graphs,
// tensors, configurations, metrics and data are pure Go (the house rule).
func TestPurePackagesBuildWithoutCgo(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	// Each package: its path, whether it has cgo files of its own (ort; the
	// JPEG decoder and NVML bindings, which link C libraries too), whether
	// it has Go files at all, and its dependencies.
	list := exec.Command("go", "list", "-f", "{{.ImportPath}} {{len .CgoFiles}} {{len .GoFiles}}{{range .Deps}} {{.}}{{end}}", "./...")
	list.Dir = ".."
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	cgo := map[string]bool{}
	var rows [][]string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if f[1] != "0" {
			cgo[f[0]] = true
		}
		rows = append(rows, f)
	}
	var pure []string
	for _, f := range rows {
		if cgo[f[0]] || f[2] == "0" || strings.Contains(f[0], "/scratch") || slices.ContainsFunc(f[3:], func(d string) bool { return cgo[d] }) {
			continue
		}
		pure = append(pure, f[0])
	}
	// The graph IR, autodiff, configs, metrics, loaders, recipes at least.
	for _, want := range []string{"training/graph", "training/autodiff", "training/config", "metrics", "training/data/tokens", "models"} {
		if !slices.Contains(pure, "github.com/ortrain/ortrain/"+want) {
			t.Errorf("%s imports ort: it should not need ONNX Runtime", want)
		}
	}
	build := exec.Command("go", append([]string{"build"}, pure...)...)
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build of %d packages: %v\n%s", len(pure), err, out)
	}
	t.Logf("%d packages build without cgo", len(pure))
}
