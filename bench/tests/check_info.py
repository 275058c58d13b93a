#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""epcomm-info's plans without a GPU.

    check_info.py INFO

Checks: --plan-only prints both modes' plans and exits 0 wherever it runs; one node (the
default) has no network staging region; 16 ranks in nodes of 8 have one, and their window
is the sum of the regions the plan lists (last offset + size, rounded to the window's
alignment at most); --plan-node-size and its older spelling --node-size print the same;
--ht-combine-per-entry makes the HT combine window max_topk times as large (one slot per
top-k entry) and leaves the LL plan alone; across nodes both --ht-combine-per-entry and
--ll-combine-per-entry are planned, each with a larger staging region (the entries' rows); a
node size that does not divide --plan-ranks exits 2 naming the flag as given.
"""

import os
import re
import subprocess
import sys

failures = []


def run(info, args, part_tokens=None, line_tokens=None):
    """INFO's exit status and output; part_tokens sets EPCOMM_HT_PART_TOKENS (core/ht/ht_parts.hpp),
    line_tokens EPCOMM_LL_LINE_TOKENS (core/plan.hpp)."""
    env = dict(os.environ)
    env.pop("EPCOMM_HT_PART_TOKENS", None)
    env.pop("EPCOMM_LL_LINE_TOKENS", None)
    if part_tokens is not None:
        env["EPCOMM_HT_PART_TOKENS"] = str(part_tokens)
    if line_tokens is not None:
        env["EPCOMM_LL_LINE_TOKENS"] = str(line_tokens)
    p = subprocess.run([info] + args, capture_output=True, text=True, timeout=60, env=env)
    return p.returncode, p.stdout + p.stderr


def expect(condition, what, output=""):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)
        if output:
            print("      output was: " + output.strip().replace("\n", "\n      "))


def plans(output):
    """{mode: (window bytes, {region: (offset, size)})} of each printed plan."""
    found = {}
    for block in output.split("\n\n"):
        head = re.search(r"^(low-latency|high-throughput) plan: ", block, re.M)
        window = re.search(r"symmetric window per rank: [\d.]+ MiB \((\d+) bytes\)", block)
        if not head or not window:
            continue
        regions = {m[1]: (int(m[2]), int(m[3])) for m in re.finditer(r"^  (\S+)\s+(\d+)\s+(\d+)$", block, re.M)}
        found[head[1]] = (int(window[1]), regions)
    return found


def main(info):
    code, out = run(info, ["--plan-only", "--plan-ranks=8"])
    one = plans(out)
    expect(code == 0 and set(one) == {"low-latency", "high-throughput"}, "--plan-only prints both plans", out)
    expect(all("net_staging" not in r for _, r in one.values()), "one node: no network staging", out)

    code, out = run(info, ["--plan-only", "--plan-ranks=16", "--node-size=8"])
    two = plans(out)
    expect(code == 0 and "in 2 node(s) of 8" in out, "16 ranks in nodes of 8: two nodes", out)
    for mode, (window, regions) in two.items():
        end = max(offset + size for offset, size in regions.values())
        expect("net_staging" in regions, f"{mode}, two nodes: a network staging region", out)
        expect(end <= window < end + 4096, f"{mode}: the window ({window} B) holds its regions ({end} B)", out)
        if mode == "low-latency":
            expect(window > one[mode][0], f"{mode}: two nodes need more than one ({window} > {one[mode][0]} B)", out)
        else:  # steps across nodes run in parts that fit 688 MiB (core/ht/ht_parts.hpp)
            expect(window <= 688 << 20, f"{mode}: two nodes hold a part of a step ({window} <= 688 MiB)", out)

    code, spelled = run(info, ["--plan-only", "--plan-ranks=16", "--plan-node-size=8"])
    expect(code == 0 and spelled == out, "--plan-node-size=8 prints what --node-size=8 prints", spelled)
    code, out = run(info, ["--plan-only", "--plan-ranks=8", "--topk=4", "--ht-combine-per-entry"])
    per_entry = plans(out)
    code4, out4 = run(info, ["--plan-only", "--plan-ranks=8", "--topk=4"])
    plain = plans(out4)
    expect(code == 0 and code4 == 0 and "combine per entry" in out, "--ht-combine-per-entry plans", out)
    if code == 0 and code4 == 0:
        got = per_entry["high-throughput"][1]["combine_recv"][1]
        want = 4 * plain["high-throughput"][1]["combine_recv"][1]
        expect(got == want, f"per-entry combine window: 4 slots per token at top-4 ({got} == {want} B)", out)
        expect(per_entry["low-latency"] == plain["low-latency"], "--ht-combine-per-entry: the LL plan unchanged", out)
    # HT across nodes: planned, each rank staging P * max_topk entry rows per other node
    # beside its partials (parts of P = 512 tokens here, 512 * 8 slots of 14368 B:
    # tests/unit/test_plan_sizes.cpp).
    code, out = run(info, ["--plan-only", "--plan-ranks=16", "--node-size=8", "--ht-combine-per-entry"], 512)
    code16, out16 = run(info, ["--plan-only", "--plan-ranks=16", "--node-size=8"], 512)
    expect(code == 0 and code16 == 0 and "combine per entry" in out, "HT per-entry combine across nodes plans", out)
    if code == 0 and code16 == 0:
        got = plans(out)["high-throughput"][1]["net_staging"][1]
        want = plans(out16)["high-throughput"][1]["net_staging"][1] + 512 * 8 * 14368
        expect(got == want, f"HT per-entry staging: the entry rows beside the partials ({got} == {want} B)", out)
    code, out = run(info, ["--plan-only", "--plan-ranks=8", "--topk=4", "--ll-combine-per-entry"])
    ll_entry = plans(out)
    expect(code == 0 and "combine per entry" in out, "--ll-combine-per-entry plans", out)
    # Without the line records that the plain group's combine slots hold beside its partials.
    code4, out4 = run(info, ["--plan-only", "--plan-ranks=8", "--topk=4"], line_tokens=0)
    lineless = plans(out4)
    if code == 0 and code4 == 0:
        for slot in ("combine_recv[0]", "combine_recv[1]"):
            got = ll_entry["low-latency"][1][slot][1]
            want = 4 * lineless["low-latency"][1][slot][1]
            expect(got == want, f"LL {slot}: a row per entry, 4 per token at top-4 ({got} == {want} B)", out)
        expect(
            ll_entry["high-throughput"] == plain["high-throughput"], "--ll-combine-per-entry: HT plan unchanged", out
        )
    code, out = run(info, ["--plan-only", "--plan-ranks=16", "--node-size=8", "--ll-combine-per-entry"])
    ll_across = plans(out)
    expect(code == 0 and "low-latency" in ll_across, "LL per-entry combine across nodes: planned", out)
    if code == 0 and "low-latency" in ll_across and "low-latency" in two:
        # Each rank stages max_topk (8) entry rows per token for every rank of the other node
        # instead of one partial: the staging region grows with the rows too.
        got, plain_two = ll_across["low-latency"][1], two["low-latency"][1]
        expect(
            got["net_staging"][1] > plain_two["net_staging"][1],
            f"LL per-entry across nodes: staging grows ({got['net_staging'][1]} > {plain_two['net_staging'][1]} B)",
            out,
        )
        expect(
            got["combine_recv[0]"][1] == 8 * plain_two["combine_recv[0]"][1],
            "LL per-entry across nodes: a row per entry, 8 per token at top-8",
            out,
        )

    code, out = run(info, ["--plan-only", "--plan-ranks=16", "--node-size=5"])
    expect(code == 2 and "--node-size=5 does not divide --plan-ranks=16" in out, "a bad node size exits 2", out)
    code, out = run(info, ["--plan-only", "--plan-ranks=16", "--plan-node-size=5"])
    expect(code == 2 and "--plan-node-size=5 does not divide --plan-ranks=16" in out, "... naming its spelling", out)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1]))
