#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/moe_layer.py's command line where it cannot run (no torch, or no visible GPU):
--help exits 0, a bad flag exits 2 naming it, and a run with good flags exits 1 with a
message saying why nothing was measured, never a traceback. Also, without torch: the parsed
decode and prefill sizes (bench/moe/cli.py) and the table printed from a JSON record of
both paths (bench/moe/report.py).

    check_moe_cli.py MOE_LAYER_PY
"""

import io
import os
import subprocess
import sys


def run(script, args):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, script] + args, env=env, capture_output=True, text=True, timeout=120)


def cannot_measure(p):
    """Exit 1 with the no-torch or no-GPU message, no traceback."""
    return (
        p.returncode == 1
        and "Traceback" not in p.stderr
        and ("torch is not installed" in p.stderr or "no CUDA GPU is visible" in p.stderr)
    )


def point(mode, tokens, checked=True):
    return {
        "mode": mode,
        "tokens_per_rank": tokens,
        "ours_us": 100.0,
        "baseline_us": 150.0,
        "ours_tokens_per_s": 4e4 if checked else None,
        "baseline_tokens_per_s": 2.7e4 if checked else None,
        "ours_max_rel_error": 0.004 if checked else 0.5,
        "baseline_max_rel_error": 0.001,
        "checked": checked,
    }


def table(report, record):
    out = io.StringIO()
    report.print_table(record, "/tmp/moe.json", out)
    return out.getvalue()


def in_process_checks(bench_dir):
    """(description, ok) of the parser and the table, imported without torch."""
    sys.path.insert(0, bench_dir)
    from moe import cli, report

    checks = []
    args = cli.parse_args([])
    checks.append(
        (
            "the default sizes: decode 1,4,16,64,128 (ll), prefill 1024,4096 (ht), 24 SMs",
            args.token_list == [1, 4, 16, 64, 128] and args.prefill_list == [1024, 4096] and args.ht_sms == 24,
        )
    )
    args = cli.parse_args(["--prefill-tokens", "", "--tokens=2"])
    checks.append(("--prefill-tokens '' skips the prefill sizes", args.prefill_list == [] and args.token_list == [2]))
    args = cli.parse_args(["--prefill-tokens=512,8192", "--ht-sms=32"])
    config = cli.recorded_config(args)
    checks.append(
        (
            "--prefill-tokens and --ht-sms parse; the record keeps the flags, not the lists",
            args.prefill_list == [512, 8192]
            and config["prefill_tokens"] == "512,8192"
            and config["ht_sms"] == 32
            and "prefill_list" not in config
            and "token_list" not in config,
        )
    )
    config = {"hidden": 4096, "ffn": 1024, "experts": 64, "topk": 6, "iters": 30, "ht_sms": 24}
    record = {
        "gpus": 4,
        "gpu_name": "GPU",
        "config": config,
        "points": [point("ll", 1), point("ll", 128), point("ht", 1024), point("ht", 4096, checked=False)],
    }
    text = table(report, record)
    lines = text.splitlines()
    rows = [line for line in lines if line.strip().startswith(("ll |", "ht |"))]
    checks.append(
        (
            "the table has a mode column and one row per point, ll then ht",
            "mode" in text
            and [r.split("|")[0].strip() for r in rows] == ["ll", "ll", "ht", "ht"]
            and rows[2].split("|")[1].strip() == "1024",
        )
    )
    checks.append(
        (
            "the table names both paths (ht with its SM budget) and the JSON file",
            "low-latency" in text
            and "high-throughput" in text
            and "24 SMs" in text
            and lines[-1] == "(JSON: /tmp/moe.json)",
        )
    )
    checks.append(
        (
            "an unchecked point is WRONG RESULT, not timed; checked ones have a speed-up",
            "WRONG RESULT" in rows[3] and "1.50" in rows[2],
        )
    )
    legacy = {
        "gpus": 4,
        "gpu_name": "GPU",
        "config": {k: v for k, v in config.items() if k != "ht_sms"},
        "points": [{k: v for k, v in point("ll", 16).items() if k != "mode"}],
    }
    text = table(report, legacy)
    checks.append(
        (
            "a record from before the ht path (no mode) prints as ll",
            any(line.strip().startswith("ll |") for line in text.splitlines()) and "high-throughput" not in text,
        )
    )
    return checks


def main():
    script = sys.argv[1]
    checks = []
    p = run(script, ["--help"])
    checks.append(
        (
            "--help exits 0 and lists the flags",
            p.returncode == 0
            and all(flag in p.stdout for flag in ("--tokens", "--prefill-tokens", "--ht-sms", "--experts")),
        )
    )
    for flags, name, words in (
        (["--tokens=a"], "--tokens", "comma-separated integers"),
        (["--prefill-tokens=a"], "--prefill-tokens", "comma-separated integers"),
        (["--prefill-tokens=1024,0"], "--prefill-tokens", "at least 1"),
        (["--prefill-tokens=70000"], "--prefill-tokens", "at most 65536"),
        (["--prefill-tokens=1024,,4096"], "--prefill-tokens", "comma-separated integers"),
        (["--ht-sms=0"], "--ht-sms", "at least 1"),
    ):
        p = run(script, flags)
        checks.append(
            (f"{' '.join(flags)} exits 2 naming {name}", p.returncode == 2 and name in p.stderr and words in p.stderr)
        )
    for flags in ([], ["--prefill-tokens="], ["--prefill-tokens", ""], ["--prefill-tokens=512,2048", "--ht-sms=16"]):
        p = run(script, flags)
        checks.append(
            (
                f"{' '.join(repr(f) for f in flags) or 'no flags'}: without torch or "
                f"GPU, exit 1 with a message ({p.stderr.strip()})",
                cannot_measure(p),
            )
        )
    checks += in_process_checks(os.path.dirname(os.path.abspath(script)))
    failures = 0
    for description, ok in checks:
        print(("ok    " if ok else "FAIL  ") + description)
        failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
