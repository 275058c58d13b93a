// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// abiSnapshot is the part of capi/abi.json these tests read.
type abiSnapshot struct {
	Versions map[string]struct {
		Constants map[string]int64 `json:"constants"`
		Structs   map[string]struct {
			Size   uintptr `json:"size"`
			Align  uintptr `json:"align"`
			Fields map[string]struct {
				Offset uintptr `json:"offset"`
				Size   uintptr `json:"size"`
			} `json:"fields"`
		} `json:"structs"`
	} `json:"versions"`
}

// loadSnapshot reads $EPCOMM_ABI_JSON (set by the Meson test), else the repository's copy.
func loadSnapshot(t *testing.T) abiSnapshot {
	t.Helper()
	path := os.Getenv("EPCOMM_ABI_JSON")
	if path == "" {
		path = filepath.Join("..", "..", "..", "capi", "abi.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the ABI snapshot (set EPCOMM_ABI_JSON): %v", err)
	}
	var snapshot abiSnapshot
	if err := json.Unmarshal(data, &snapshot); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if _, ok := snapshot.Versions[BindingsVersion.String()]; !ok {
		t.Fatalf("%s has no entry for ABI %v, the header's version", path, BindingsVersion)
	}
	return snapshot
}

func TestConstantsMatchTheCompilerAndTheSnapshot(t *testing.T) {
	snapshot := loadSnapshot(t)
	goValues := map[string]int64{}
	for _, c := range headerConstants() {
		goValues[c.Name] = c.Go
		if c.Go != c.C {
			t.Errorf("%s: Go %d, C %d", c.Name, c.Go, c.C)
		}
	}
	// The constants that name the ABI version itself differ between versions by design.
	versionNames := map[string]bool{"EPC_ABI_MINOR": true, "EPC_ABI_PATCH": true, "EPC_ABI_VERSION": true}
	for version, v := range snapshot.Versions {
		for name, want := range v.Constants {
			if version != BindingsVersion.String() && versionNames[name] {
				continue
			}
			got, ok := goValues[name]
			if !ok {
				t.Errorf("ABI %s: %s is missing from the Go bindings", version, name)
			} else if got != want {
				t.Errorf("ABI %s: %s is %d in Go, %d in the snapshot", version, name, got, want)
			}
		}
	}
	if current := snapshot.Versions[BindingsVersion.String()].Constants; len(current) != len(goValues) {
		t.Errorf("the snapshot of ABI %v has %d constants, the header %d", BindingsVersion, len(current), len(goValues))
	}
}

// Layouts as cgo compiles the C structs, against every snapshot version: fields keep their
// offsets and sizes in every version; the current version matches exactly, older ones may
// only have grown.
func TestStructLayoutsMatchTheSnapshot(t *testing.T) {
	snapshot := loadSnapshot(t)
	layouts := map[string]structLayout{}
	for _, s := range headerStructLayouts() {
		layouts[s.Name] = s
	}
	for version, v := range snapshot.Versions {
		current := version == BindingsVersion.String()
		for name, want := range v.Structs {
			got, ok := layouts[name]
			if !ok {
				t.Errorf("ABI %s: struct %s is missing from the header", version, name)
				continue
			}
			if got.Size < want.Size || (current && got.Size != want.Size) || got.Align != want.Align {
				t.Errorf("ABI %s: %s is %d bytes aligned %d; snapshot %d aligned %d",
					version, name, got.Size, got.Align, want.Size, want.Align)
			}
			fields := map[string]fieldLayout{}
			for _, f := range got.Fields {
				fields[f.Name] = f
			}
			for field, wantField := range want.Fields {
				gotField, ok := fields[field]
				if !ok && !current && strings.HasPrefix(field, "reserved") {
					// A reserved field exists to be given a meaning later: a field at the
					// same offset and size under a new name is that, not a removal (as in
					// tools/check_abi.py), e.g. reserved0 -> virtual_node_size in ABI 1.3.
					gotField, ok = fieldAt(got.Fields, wantField.Offset, wantField.Size)
				}
				if !ok || gotField.Offset != wantField.Offset || gotField.Size != wantField.Size {
					t.Errorf("ABI %s: %s.%s at %d size %d (found %v); snapshot %d size %d",
						version, name, field, gotField.Offset, gotField.Size, ok, wantField.Offset, wantField.Size)
				}
			}
			if current && len(fields) != len(want.Fields) {
				t.Errorf("ABI %s: %s has %d fields, the snapshot %d", version, name, len(fields), len(want.Fields))
			}
		}
		if current && len(v.Structs) != len(layouts) {
			t.Errorf("ABI %s: the snapshot has %d structs, the header %d", version, len(v.Structs), len(layouts))
		}
	}
}

// fieldAt is the field of fields at offset with size bytes, if there is one.
func fieldAt(fields []fieldLayout, offset, size uintptr) (fieldLayout, bool) {
	for _, f := range fields {
		if f.Offset == offset && f.Size == size {
			return f, true
		}
	}
	return fieldLayout{}, false
}
