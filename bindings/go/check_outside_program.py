#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A program outside the repository builds against an installed epcomm, as a user's would.

1. `meson install --destdir` puts the library just built into a staging prefix (library,
   header, epcomm.pc).
2. A module in a temporary directory requires this binding by its module path (go.mod) with
   a `replace` pointing here (no network), and calls the library (version, plan query).
3. Default build: cgo finds the header and the library through pkg-config, with only
   PKG_CONFIG_PATH pointing into the staging prefix (no CGO_CFLAGS/CGO_LDFLAGS). `go vet`
   must be quiet, the program must run against the staged library, and without
   PKG_CONFIG_PATH the build must fail (so pkg-config is what found it).
4. `-tags epcomm_nopkgconfig`: the same with CGO_CFLAGS/CGO_LDFLAGS and pkg-config disabled.
Usage: check_outside_program.py MESON BUILD_DIR   (Go's caches and GOPROXY=off from the env)
"""

import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent

PROGRAM = """package main

import (
	"fmt"
	"log"

	"{module}/epcomm"
)

func main() {{
	version, err := epcomm.Version()
	if err != nil {{
		log.Fatal(err)
	}}
	plan, err := epcomm.PlanQuery(epcomm.GroupConfig{{NumExperts: 256, Hidden: 7168}}, 8, 8, 1)
	if err != nil {{
		log.Fatal(err)
	}}
	fmt.Printf("libepcomm %v; 8 ranks of hidden 7168 need %d bytes of window each\\n", version, plan.SymmetricBytes)
}}
"""


def module_path():
    for line in (HERE / "go.mod").read_text().splitlines():
        if line.startswith("module "):
            return line.split()[1]
    sys.exit("go.mod declares no module")


def run(what, args, cwd, env):
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    return result.returncode, (result.stdout + result.stderr).strip()


def main():
    meson, build_dir = sys.argv[1], sys.argv[2]
    module = module_path()
    failures = []

    def expect(ok, what, output=""):
        print(("ok: " if ok else "FAIL: ") + what)
        if not ok:
            failures.append(f"{what}\n{output}")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        stage = tmp / "stage"
        code, output = run(
            "install",
            [meson, "install", "-C", build_dir, "--no-rebuild", "--quiet", "--destdir", str(stage)],
            None,
            os.environ,
        )
        if code != 0:
            sys.exit(f"meson install --destdir failed:\n{output}")
        pc_files = sorted(stage.rglob("epcomm.pc"))
        libs = sorted(stage.rglob("libepcomm.so.*"))
        headers = sorted(stage.rglob("epcomm/epcomm.h"))
        if not pc_files or not libs or not headers:
            sys.exit(f"the staged install lacks epcomm.pc, libepcomm.so.* or epcomm.h: {pc_files} {libs} {headers}")
        pc_dir, lib_dir, include_dir = pc_files[0].parent, libs[0].parent, headers[0].parent.parent
        print(f"staged install: {pc_files[0]}")

        program = tmp / "outside"
        program.mkdir()
        (program / "go.mod").write_text(
            f"module example.com/outside\n\ngo 1.19\n\nrequire {module} v0.0.0\n\nreplace {module} => {HERE}\n"
        )
        (program / "main.go").write_text(PROGRAM.format(module=module))

        base = {k: v for k, v in os.environ.items() if k not in ("CGO_CFLAGS", "CGO_LDFLAGS", "PKG_CONFIG_PATH")}
        base["CGO_ENABLED"] = "1"
        base["LD_LIBRARY_PATH"] = str(lib_dir)  # the staged library, not the build tree's
        # Each build below gets a Go cache of its own: Go reuses a cached cgo package without
        # running pkg-config again, with the flags of whatever prefix it was built against.
        empty = tmp / "empty"
        empty.mkdir()
        variants = [
            ("pkg-config", [], {"PKG_CONFIG_PATH": str(pc_dir)}),
            (
                "epcomm_nopkgconfig",
                ["-tags", "epcomm_nopkgconfig"],
                {
                    "PKG_CONFIG": "false",
                    "CGO_CFLAGS": f"-I{include_dir}",
                    "CGO_LDFLAGS": f"-L{lib_dir}",
                },
            ),
        ]
        for name, tags, changes in variants:
            env = dict(base, GOCACHE=str(tmp / f"gocache-{name}"), **changes)
            code, output = run("vet", ["go", "vet", *tags, "./..."], program, env)
            expect(code == 0 and output == "", f"{name}: go vet is quiet", output)
            exe = tmp / f"outside-{name}"
            code, output = run("build", ["go", "build", *tags, "-o", str(exe), "."], program, env)
            expect(code == 0, f"{name}: go build of a program outside the repository", output)
            if code != 0:
                continue
            code, output = run("ldd", ["ldd", str(exe)], program, env)
            expect(f"libepcomm.so.2 => {lib_dir}/" in output, f"{name}: links the staged libepcomm.so.2", output)
            code, output = run("run", [str(exe)], program, env)
            expect(code == 0 and "libepcomm 2." in output, f"{name}: runs: {output}", output)

        # Without PKG_CONFIG_PATH (and no default pkg-config path), the default build fails:
        # pkg-config, not something else, found the library above.
        env = dict(base, GOCACHE=str(tmp / "gocache-none"), PKG_CONFIG_PATH=str(empty), PKG_CONFIG_LIBDIR=str(empty))
        code, output = run("build", ["go", "build", "-o", str(tmp / "nothing"), "."], program, env)
        expect(
            code != 0 and "pkg-config" in output, "without PKG_CONFIG_PATH the default build fails", f"{code}: {output}"
        )

    if failures:
        sys.exit("\n\n".join(failures))


if __name__ == "__main__":
    main()
