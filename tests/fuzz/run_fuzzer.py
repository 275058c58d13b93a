#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run one libFuzzer target for a bounded time, starting from its committed seed corpus.

    run_fuzzer.py FUZZER --seeds tests/fuzz/corpus/NAME --work BUILD/fuzz/NAME --seconds 45

New inputs go to WORK/corpus (the committed seeds are only read); a crash, leak, timeout or
out-of-memory input is written to WORK/ by libFuzzer and printed here in hex, with what to do
next: add it to the committed corpus (so the replay test in the unit suite keeps running it)
and turn it into a unit test in tests/unit. Exit status: 0 when nothing was found, else 1
(never libFuzzer's 77, which test runners take for a skip).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

FINDING_PREFIXES = ("crash-", "leak-", "timeout-", "oom-", "slow-unit-")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1].strip())
    parser.add_argument("fuzzer")
    parser.add_argument("--seeds", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--seconds", required=True, type=int)
    args = parser.parse_args(argv)

    if not args.seeds.is_dir() or not any(args.seeds.iterdir()):
        print(f"run_fuzzer: no seed corpus in {args.seeds}", file=sys.stderr)
        return 2
    corpus = args.work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for old in args.work.iterdir():
        if old.name.startswith(FINDING_PREFIXES):
            old.unlink()
    command = [
        args.fuzzer,
        f"-max_total_time={args.seconds}",
        "-timeout=10",
        "-rss_limit_mb=2048",
        "-max_len=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={args.work}/",
        str(corpus),
        str(args.seeds),
    ]
    print("run_fuzzer:", " ".join(command), flush=True)
    status = subprocess.run(command, check=False).returncode

    findings = sorted(p for p in args.work.iterdir() if p.name.startswith(FINDING_PREFIXES))
    for finding in findings:
        data = finding.read_bytes()
        print(f"run_fuzzer: finding {finding} ({len(data)} bytes): {data[:512].hex()}")
    if status != 0 or findings:
        print(
            f"run_fuzzer: {Path(args.fuzzer).name} found a problem. Reproduce it with "
            f"`{args.fuzzer} <file>` (or the replay test of the normal build), copy the file "
            f"into {args.seeds}/, fix the cause and add a unit test for it in tests/unit."
        )
        # libFuzzer's own error status is 77, which meson reads as a skip: a finding must fail.
        return 1
    print(
        f"run_fuzzer: {Path(args.fuzzer).name}: nothing found in {args.seconds} s "
        f"({sum(1 for _ in corpus.iterdir())} new corpus inputs in {corpus})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
