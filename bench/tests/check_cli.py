#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""epcomm-bench's command line where no GPU may be used (CI, or GPUs hidden on purpose).

    check_cli.py BENCH

Checks: --help exits 0 and documents every flag; with the GPUs hidden
(CUDA_VISIBLE_DEVICES="") the benchmark exits 1 with a message naming the missing GPU and no
crash; --mode=ht (bf16 and fp8, either sizing) and --dtype=fp8 are accepted and stop at the
GPU check, as are LL fp8 --scales layouts; a flag that does not apply to HT
(--fp8-pow2-scales), --scales a mode's payload cannot take, bad flags and a
--virtual-node-size that does not divide --ranks exit 2 naming the flag; HT's receive window
flags (--capacity-factor, --overflow) are accepted on flat HT runs of one node and refused by
name elsewhere (LL, expert-packed, virtual nodes, values out of range).
"""

import os
import re
import subprocess
import sys


def run(bench, args, hide_gpus=False):
    env = dict(os.environ)
    # The rank variables would make the program a rank instead of the launcher.
    for name in ("EPC_RANK", "EPC_WORLD_SIZE", "EPC_UNIQUE_ID", "EPC_LOCAL_DEVICE"):
        env.pop(name, None)
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    p = subprocess.run([bench] + args, env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


failures = []


def expect(condition, what, output=""):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)
        if output:
            print("      output was: " + output.strip().replace("\n", "\n      "))


def main():
    bench = sys.argv[1]

    rc, out, err = run(bench, ["--help"])
    expect(rc == 0, "--help exits 0", err)
    flags = set(re.findall(r"^  (--[a-z0-9-]+)", out, re.M))
    for flag in (
        "--mode",
        "--tokens",
        "--hidden",
        "--topk",
        "--experts",
        "--dtype",
        "--sms",
        "--routing",
        "--hot-share",
        "--masked",
        "--warmup",
        "--iters",
        "--graph",
        "--send-only",
        "--out",
        "--baseline",
        "--ceiling",
        "--ranks",
        "--ht-sizing",
        "--large-from",
        "--large-warmup",
        "--large-iters",
        "--virtual-node-size",
        "--cupti",
        "--weights-at",
        "--capacity-factor",
        "--overflow",
    ):
        expect(flag in flags, f"--help documents {flag}")

    rc, out, err = run(bench, ["--tokens=1..256"], hide_gpus=True)
    expect(rc == 1, f"with GPUs hidden: exit code 1 (got {rc})", out + err)
    expect("no CUDA GPU is visible" in err, "with GPUs hidden: the message says no GPU is visible", out + err)

    for args in (
        ["--mode=ht", "--tokens=1024..16384"],
        ["--mode=ht", "--tokens=4096", "--dtype=fp8", "--ht-sizing=capacity", "--graph"],
        ["--dtype=fp8", "--scales=ue8m0-packed"],
        ["--dtype=fp8", "--scales=fp32-colmajor"],
        ["--dtype=fp8", "--scales=ue8m0-packed-rowmajor"],
        ["--quant=fp8", "--scales=ue8m0"],
        ["--quant=passthrough", "--layout=rank-major", "--scales=ue8m0"],
        ["--quant=passthrough", "--layout=flat", "--payload=e2m1", "--scales=uint8"],
        ["--mode=ht", "--layout=expert-packed", "--weights-at=combine"],
        ["--mode=ll", "--weights-at=combine"],
        ["--mode=ht", "--tokens=4096", "--capacity-factor=0.5", "--overflow=drop"],
        ["--mode=ht", "--capacity-factor=0.25", "--overflow=fail", "--ht-sizing=capacity"],
        ["--mode=ht", "--ranks=4", "--virtual-node-size=4", "--capacity-factor=0.5"],
        # Served across nodes too since 2.1 (virtual ones here).
        ["--mode=ht", "--ranks=4", "--virtual-node-size=2", "--capacity-factor=0.5", "--overflow=drop"],
        ["--mode=ht", "--ranks=2", "--virtual-node-size=1", "--capacity-factor=0.25", "--overflow=fail"],
    ):
        rc, out, err = run(bench, args, hide_gpus=True)
        expect(
            rc == 1 and "no CUDA GPU is visible" in err,
            f"{' '.join(args)} is accepted and then stops at the GPU check",
            out + err,
        )

    for args, name in (
        (["--mode=ht", "--dtype=fp8", "--fp8-pow2-scales"], "--fp8-pow2-scales"),
        (["--tokens=2048"], "--mode=ll allows at most 1024"),
        (["--mode=ht", "--ht-sizing=lazy"], "--ht-sizing"),
        (["--scales=ue8m0"], "--scales=ue8m0 with --mode=ll"),
        (["--dtype=fp8", "--scales=bf16"], "--scales=bf16 with --mode=ll"),
        (["--mode=ht", "--quant=passthrough", "--scales=fp32-colmajor"], "--scales=fp32-colmajor"),
        (["--quant=passthrough", "--scales=ue8m0-packed-rowmajor"], "--scales=ue8m0-packed-rowmajor is an LL fp8"),
        (["--scales=ue8m0-packed-rowmajor"], "--scales=ue8m0-packed-rowmajor with --mode=ll"),
        (["--mode=ht", "--quant=fp8"], "--quant=fp8 (the cast in the send kernel) serves --mode=ll"),
        (["--quant=passthrough", "--scale-count=4000"], "2 * hidden bytes of an LL message"),
        (["--mode=ht", "--weights-at=combine"], "--weights-at=combine"),
        (["--layout=flat", "--weights-at=combine"], "--weights-at=combine"),
        (["--capacity-factor=0.5"], "--capacity-factor sizes the high-throughput receive window"),
        (["--mode=ll", "--overflow=drop"], "--overflow=drop sizes the high-throughput receive window"),
        (["--mode=ht", "--capacity-factor=0"], "--capacity-factor: expected a number in (0, 1]"),
        (["--mode=ht", "--capacity-factor=2"], "--capacity-factor: expected a number in (0, 1]"),
        (["--mode=ht", "--overflow=wrap"], "--overflow: expected fail or drop"),
        (["--mode=ht", "--layout=expert-packed", "--capacity-factor=0.5"], "--capacity-factor below 1 serves"),
        (
            ["--mode=ht", "--ranks=4", "--virtual-node-size=2", "--layout=expert-packed", "--capacity-factor=0.5"],
            "--capacity-factor below 1 serves",
        ),
    ):
        rc, out, err = run(bench, args, hide_gpus=True)
        expect(rc == 2 and name in err, f"{' '.join(args)} exits 2 naming {name}", out + err)

    rc, out, err = run(bench, ["--dtype=fp8"], hide_gpus=True)
    expect(
        rc == 1 and "no CUDA GPU is visible" in err,
        "--dtype=fp8 is accepted and then stops at the GPU check",
        out + err,
    )

    for args, name in (
        (["--hidden=100"], "--hidden"),
        (["--frobnicate"], "--frobnicate"),
        (["--tokens=0"], "--tokens"),
        (["--routing=zipf"], "--routing"),
    ):
        rc, out, err = run(bench, args, hide_gpus=True)
        expect(rc == 2 and name in err, f"{args[0]} exits 2 naming {name}", out + err)

    # The node size is checked against --ranks before any GPU is looked for.
    rc, out, err = run(bench, ["--ranks=4", "--virtual-node-size=3"], hide_gpus=True)
    expect(
        rc == 2 and "--virtual-node-size=3 does not divide the rank count 4" in err,
        "--ranks=4 --virtual-node-size=3 exits 2 naming --virtual-node-size",
        out + err,
    )
    for args in (["--ranks=4", "--virtual-node-size=2"], ["--mode=ht", "--ranks=4", "--virtual-node-size=1"]):
        rc, out, err = run(bench, args, hide_gpus=True)
        expect(
            rc == 1 and "no CUDA GPU is visible" in err,
            f"{' '.join(args)} is accepted and then stops at the GPU check",
            out + err,
        )

    rc, out, err = run(bench, ["--out=/nonexistent-dir/run.json"])
    expect(
        rc == 1 and ("/nonexistent-dir/run.json" in err or "no CUDA GPU" in err),
        "an unwritable --out (or no GPU) fails before any work",
        out + err,
    )

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
