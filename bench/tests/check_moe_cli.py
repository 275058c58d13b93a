#!/usr/bin/env python3
"""bench/moe_layer.py's command line where it cannot run (no torch, or no visible GPU):
--help exits 0, a bad flag exits 2, and a plain run exits 1 with a message saying why
nothing was measured, never a traceback.

    check_moe_cli.py MOE_LAYER_PY
"""
import os
import subprocess
import sys


def run(script, args):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, script] + args, env=env, capture_output=True, text=True,
                          timeout=120)


def main():
    script = sys.argv[1]
    failures = 0
    p = run(script, ["--help"])
    ok = p.returncode == 0 and "--tokens" in p.stdout and "--experts" in p.stdout
    print(("ok    " if ok else "FAIL  ") + "--help exits 0 and lists the flags")
    failures += not ok
    p = run(script, ["--tokens=a"])
    ok = p.returncode == 2 and "--tokens" in p.stderr
    print(("ok    " if ok else "FAIL  ") + "a bad --tokens exits 2 naming the flag")
    failures += not ok
    p = run(script, [])
    ok = p.returncode == 1 and ("torch is not installed" in p.stderr or "no CUDA GPU is visible" in p.stderr) \
        and "Traceback" not in p.stderr
    print(("ok    " if ok else "FAIL  ") + f"without torch or GPU: exit 1 with a message ({p.stderr.strip()})")
    failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
