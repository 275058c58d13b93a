// SPDX-License-Identifier: Apache-2.0
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

// The README's examples must compile against this package: the first is a complete
// program; every ```go block is gofmt-formatted and builds (a package main as a program,
// any other package as a library).
func TestReadmeExamplesBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs; skipped with -short")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 || !strings.Contains(blocks[0], "package main") {
		t.Fatal("README.md's first ```go block is not a complete program")
	}
	module, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	modulePath := readModulePath(t)
	for i, block := range blocks {
		if formatted, err := format.Source([]byte(block)); err != nil || string(formatted) != block {
			t.Errorf("README example %d is not gofmt-formatted (%v)", i+1, err)
		}
		dir := t.TempDir()
		goMod := "module readmeexample\n\ngo 1.19\n\nrequire " + modulePath + " v0.0.0\n\nreplace " + modulePath + " => " + module + "\n"
		for name, text := range map[string]string{"go.mod": goMod, "example.go": block} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		args := []string{"build", "."}
		if strings.Contains(block, "package main") {
			args = []string{"build", "-o", filepath.Join(dir, "example"), "."}
		}
		build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
		build.Dir = dir
		if output, err := build.CombinedOutput(); err != nil {
			t.Errorf("go build of README example %d: %v\n%s", i+1, err, output)
		}
	}
}

// goBlocks returns the contents of every ```go block, in order.
func goBlocks(markdown string) []string {
	var blocks []string
	for {
		start := strings.Index(markdown, "```go\n")
		if start < 0 {
			return blocks
		}
		rest := markdown[start+len("```go\n"):]
		end := strings.Index(rest, "\n```")
		if end < 0 {
			return blocks
		}
		blocks = append(blocks, rest[:end+1])
		markdown = rest[end:]
	}
}

// readModulePath returns the module path that ../go.mod declares (set there once).
func readModulePath(t *testing.T) string {
	goMod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(goMod), "\n") {
		if path := strings.TrimPrefix(line, "module "); path != line {
			return strings.TrimSpace(path)
		}
	}
	t.Fatal("../go.mod declares no module")
	return ""
}
