package epcomm

import (
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The README's complete example must compile against this package.
func TestReadmeExampleBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program; skipped with -short")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	program := firstGoBlock(string(readme))
	if !strings.Contains(program, "package main") {
		t.Fatal("README.md has no ```go block with a complete program")
	}
	if formatted, err := format.Source([]byte(program)); err != nil || string(formatted) != program {
		t.Errorf("the README example is not gofmt-formatted (%v)", err)
	}
	module, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module readmeexample\n\ngo 1.19\n\nrequire epcomm v0.0.0\n\nreplace epcomm => " + module + "\n"
	for name, text := range map[string]string{"go.mod": goMod, "main.go": program} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", filepath.Join(dir, "example"), ".")
	build.Dir = dir
	if output, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the README example: %v\n%s", err, output)
	}
}

func firstGoBlock(markdown string) string {
	start := strings.Index(markdown, "```go\n")
	if start < 0 {
		return ""
	}
	rest := markdown[start+len("```go\n"):]
	end := strings.Index(rest, "\n```")
	if end < 0 {
		return ""
	}
	return rest[:end+1]
}
