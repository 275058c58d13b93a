#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The committed format sample is what the JSON writer makes now, and it passes the reader.

    check_sample.py SAMPLE_WRITER COMMITTED_JSON [WRITER_FLAGS...]

SAMPLE_WRITER is bench-json-sample (bench/tests/json_sample_main.cpp), run with WRITER_FLAGS
(--ht for the high-throughput sample), and once more with --virtual-node-size=2 to check the
reader on a record with network bytes. When the format changes on purpose, regenerate:
    build/bench/bench-json-sample > bench/samples/format_sample.json
    build/bench/bench-json-sample --ht > bench/samples/format_sample_ht.json
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_json  # noqa: E402


def main():
    writer, committed, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    fresh = subprocess.run([writer] + flags, capture_output=True, text=True, check=True).stdout
    with open(committed, encoding="utf-8") as f:
        saved = f.read()
    if fresh != saved:
        print(
            f"FAIL  {committed} differs from what {os.path.basename(writer)} writes now; if the "
            f"format changed on purpose, regenerate it:\n      {' '.join([writer] + flags)} > {committed}\n"
            f"      (and update bench/JSON.md)"
        )
        return 1
    record = bench_json.load(committed)
    if not record["format_sample"] or "not a measurement" not in record.get("note", ""):
        print("FAIL  the sample does not say that it is a format sample")
        return 1
    # The reader must reject what it should: prove the check can fail.
    broken = dict(record)
    del broken["points"]
    try:
        bench_json.check(broken)
        print("FAIL  the reader accepted a record without points")
        return 1
    except bench_json.FormatError:
        pass
    broken = json.loads(saved)
    first = next(iter(broken["points"][0]["times"]))
    del broken["points"][0]["times"][first]["mean_us"]
    try:
        bench_json.check(broken)
        print("FAIL  the reader accepted a format /4 summary without mean_us")
        return 1
    except bench_json.FormatError:
        pass
    broken = json.loads(saved)
    broken["cupti"]["library"] = None
    try:
        bench_json.check(broken)
        print("FAIL  the reader accepted an active cupti without its library")
        return 1
    except bench_json.FormatError:
        pass
    if record["config"]["mode"] == "ll" and record["floor"] is None:
        print("FAIL  the LL sample has no latency floor")
        return 1
    broken = json.loads(saved)
    if broken["floor"] is not None:
        del broken["floor"]["step"]["mean_us"]
        try:
            bench_json.check(broken)
            print("FAIL  the reader accepted a floor whose step summary lacks mean_us")
            return 1
        except bench_json.FormatError:
            pass
    if not all(isinstance(p["roofline"]["step_us"], (int, float)) for p in record["points"]):
        print("FAIL  the sample has a point without a roofline")
        return 1
    broken = json.loads(saved)
    del broken["points"][0]["roofline"]["combine"]["wire_us"]
    try:
        bench_json.check(broken)
        print("FAIL  the reader accepted a roofline without wire_us")
        return 1
    except bench_json.FormatError:
        pass
    # /5: the receive window and the dropped rows are required and checked.
    ht = record["config"]["mode"] == "ht"
    for what, key, value in (
        ("a record without config.overflow", ("config", "overflow"), None),
        ("a point without dropped_rows", ("points", "dropped_rows"), None),
        ("a negative dropped_rows", ("points", "dropped_rows"), [-1] * record["config"]["ranks"]),
        # Out of (0, 1] for HT; any number for LL, whose window is not the bench's to size.
        ("a wrong capacity_factor", ("config", "capacity_factor"), 1.5 if ht else 0.5),
        # /6: the layout and payload options are required and checked.
        ("a record without config.layout", ("config", "layout"), None),
        ("an unknown config.layout", ("config", "layout"), "rank-minor"),
        ("a negative config.alignment", ("config", "alignment"), -1),
        ("an unknown config.scales", ("config", "scales"), "fp64"),
    ):
        broken = json.loads(saved)
        holder = broken["config"] if key[0] == "config" else broken["points"][0]
        if value is None:
            del holder[key[1]]
        else:
            holder[key[1]] = value
        try:
            bench_json.check(broken)
            print(f"FAIL  the reader accepted {what}")
            return 1
        except bench_json.FormatError:
            pass
    # A phase-trace build's figures are metrics like the others; an unknown kind is refused.
    traced = json.loads(saved)
    times = traced["points"][0]["times"]
    times["ours.phase.dispatch_send"] = dict(next(iter(times.values())))
    bench_json.check(traced)
    times["ours.bogus.dispatch"] = times.pop("ours.phase.dispatch_send")
    try:
        bench_json.check(traced)
        print("FAIL  the reader accepted a metric of an unknown kind")
        return 1
    except bench_json.FormatError:
        pass
    # A run with virtual nodes (not committed): valid, and some of its bytes cross nodes.
    fresh = subprocess.run(
        [writer] + flags + ["--virtual-node-size=2"], capture_output=True, text=True, check=True
    ).stdout
    nodes = bench_json.check(json.loads(fresh))
    if nodes["config"]["nodes"] != 2 or not any(nodes["points"][0]["bytes"]["wire_dispatch_network"]):
        print("FAIL  a record with --virtual-node-size=2 does not have 2 nodes and network bytes")
        return 1
    if any(record["points"][0]["bytes"]["wire_dispatch_network"]) or record["config"]["nodes"] != 1:
        print("FAIL  the sample (no virtual nodes) has network bytes or more than one node")
        return 1
    broken = json.loads(fresh)
    broken["points"][0]["bytes"]["wire_combine_network"][0] += 1
    try:
        bench_json.check(broken)
        print("FAIL  the reader accepted wire_combine_nvlink + wire_combine_network != wire_combine")
        return 1
    except bench_json.FormatError:
        pass
    print(f"ok    {committed} is current, valid, and labelled a format sample")
    return 0


if __name__ == "__main__":
    sys.exit(main())
