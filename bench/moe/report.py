# SPDX-License-Identifier: Apache-2.0
"""The table moe_layer.py prints from its JSON record. Needs no torch."""

import sys

MODES = {
    "ll": "low-latency path, decode sizes",
    "ht": "high-throughput path, prefill sizes",
}


def print_table(record, path, out=None):
    """Print `record` (what moe_layer.py writes to `path`) as a table on `out` (stdout)."""
    out = out or sys.stdout
    c = record["config"]
    print(
        f"MoE layer on {record['gpus']} x {record['gpu_name']}: hidden {c['hidden']}, "
        f"ffn {c['ffn']}, {c['experts']} experts, top-{c['topk']}, bf16; median of the "
        f"slowest rank over {c['iters']} layers",
        file=out,
    )
    modes = []
    for p in record["points"]:
        mode = p.get("mode", "ll")  # records from before the HT path have only LL points
        if mode not in modes:
            modes.append(mode)
    for mode in modes:
        what = MODES.get(mode, mode)
        if mode == "ht" and "ht_sms" in c:
            what += f", {c['ht_sms']} SMs"
        if mode == "ht":  # records from before the expert-packed path have no ht_alignment
            what += (
                f", expert-packed layout, zones aligned to {c['ht_alignment']} rows"
                if "ht_alignment" in c
                else ", flat layout (a CAPACITY handle, updated per layer)"
            )
        print(f"  ours {mode}: epcomm {what}; a2a: torch.distributed.all_to_all_single", file=out)
    print(
        f"{'mode':>4} | {'tokens/rank':>11} | {'ours us':>9} | {'a2a us':>9} | "
        f"{'ours tok/s':>11} | {'a2a tok/s':>11} | {'speed-up':>8} | "
        f"max rel err ours / a2a",
        file=out,
    )
    for r in record["points"]:
        lead = f"{r.get('mode', 'll'):>4} | {r['tokens_per_rank']:>11} | "
        if not r["checked"]:
            print(
                f"{lead}WRONG RESULT (ours {r['ours_max_rel_error']:.3g}, "
                f"a2a {r['baseline_max_rel_error']:.3g}): not timed",
                file=out,
            )
            continue
        print(
            f"{lead}{r['ours_us']:>9.1f} | {r['baseline_us']:>9.1f} | "
            f"{r['ours_tokens_per_s']:>11.0f} | {r['baseline_tokens_per_s']:>11.0f} | "
            f"{r['baseline_us'] / r['ours_us']:>8.2f} | {r['ours_max_rel_error']:.2g} / "
            f"{r['baseline_max_rel_error']:.2g}",
            file=out,
        )
    print(f"(JSON: {path})", file=out)
