#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Charts from epcomm-bench JSON records (bench/JSON.md).

    python3 bench/plot.py RUN.json [MORE.json ...] [--out DIR] [--name NAME]

Writes two PNGs into DIR (default: the first file's directory), named NAME, else after the
input when there is one file and "comparison" otherwise:
  <name>-latency.png    dispatch, combine and both, against tokens per rank: ours, the NCCL
                        baseline and the LSA copy ceiling (median of the slowest rank, with
                        its p10-p90 band; the ceiling also at our SM budget when measured),
                        plus ours through the API and graph replay if measured; for
                        high-throughput runs a fourth panel with the layout step (creating
                        a handle) and epc_handle_update;
  <name>-bandwidth.png  GB/s per GPU against tokens per rank: ours logical and wire, the
                        baseline's logical, the ceilings' wire, and the run's peak ceiling.
                        Logical bytes follow DeepEP's rule for the run's mode (LL: a row per
                        (token, expert); HT: a row per (token, destination rank)).
Works for LL and HT records alike (tokens per rank on a log axis). Several files are drawn
side by side (one line style per file), e.g. an HT bf16 and an HT fp8 run. A format sample
(format_sample: true) is stamped as such on every chart.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

WHO_COLOURS = {"ours": "tab:blue", "baseline": "tab:red", "ceiling": "tab:green", "ceiling_budget": "tab:olive"}
WHO = ("ours", "baseline", "ceiling", "ceiling_budget")
MODE_NAMES = {"ll": "LL", "ht": "HT"}
FILE_STYLES = ["-", "--", ":", "-."]
SAMPLE_STAMP = "FORMAT SAMPLE: invented numbers, not a measurement"


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot.py: matplotlib is not installed: python3 -m pip install matplotlib (tools/dev.sh installs it)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def label_of(path, record, several):
    gpus = record["machine"]["gpus"]
    config = record["config"]
    base = (
        f"{MODE_NAMES.get(config['mode'], config['mode'])} {config['dtype']}, "
        + (f"{config['nodes']} virtual nodes, " if config.get("virtual_node_size", 0) > 0 else "")
        + (f"{len(gpus)}x {gpus[0]['name']}" if gpus else "?")
    )
    return f"{os.path.basename(path)}: {base}" if several else base


def who_label(who, record):
    if who == "ceiling_budget":
        return f"ceiling at {record['config']['sms']} SMs"
    return who


def describe(record):
    """One line naming the run's configuration, for the chart title."""
    c = record["config"]
    mode = {"ll": "low-latency", "ht": "high-throughput"}.get(c["mode"], c["mode"])
    if c["mode"] == "ht" and c.get("ht_sizing", "none") != "none":
        mode += f" ({c['ht_sizing']} sizing)"
    gpus = record["machine"]["gpus"]
    nodes = f" in {c['nodes']} virtual nodes" if c.get("virtual_node_size", 0) > 0 else ""
    return (
        f"{mode}, {c['dtype']}, hidden {c['hidden']}, top-{c['topk']}, {c['experts']} experts, "
        f"{c['sms']} SMs, {c['ranks']} ranks{nodes}" + (f" on {gpus[0]['name']}" if gpus else "")
    )


def series(record, name, field="median_us"):
    xs, ys = [], []
    for point in record["points"]:
        summary = point["times"].get(name)
        if summary is not None and summary[field] is not None:
            xs.append(point["tokens_per_rank"])
            ys.append(summary[field])
    return xs, ys


def bandwidth_series(record, name, field):
    xs, ys = [], []
    for point in record["points"]:
        bw = point["bandwidth"].get(name)
        if bw is not None and bw[field] is not None:
            xs.append(point["tokens_per_rank"])
            ys.append(bw[field])
    return xs, ys


def stamp(fig, records):
    title = describe(records[0]) if len(records) == 1 else ""
    if any(r["format_sample"] for r in records):
        fig.text(
            0.5, 0.5, "FORMAT SAMPLE", fontsize=60, color="grey", alpha=0.25, ha="center", va="center", rotation=25
        )
        fig.suptitle(SAMPLE_STAMP + (f"\n{title}" if title else ""), color="darkred", fontweight="bold")
    elif title:
        fig.suptitle(title)


def has_metric(runs, name):
    return any(series(record, name)[0] for _, record in runs)


def axis_tokens(ax):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per rank")
    ax.grid(True, which="both", alpha=0.3)


def plot_band(ax, record, name, style, colour, marker, label):
    xs, ys = series(record, name)
    if not xs:
        return
    _, lo = series(record, name, "p10_us")
    _, hi = series(record, name, "p90_us")
    ax.plot(xs, ys, style, marker=marker, color=colour, label=label)
    ax.fill_between(xs, lo, hi, color=colour, alpha=0.15)


def plot_layout(ax, runs):
    """HT: creating a handle (host until done, and CUDA events) and epc_handle_update."""
    for i, (label, record) in enumerate(runs):
        style = FILE_STYLES[i % len(FILE_STYLES)]
        for name, colour, marker in (
            ("ours.api.layout", "tab:purple", "x"),
            ("ours.kernel.layout", "tab:blue", "o"),
            ("ours.kernel.layout_update", "tab:cyan", "s"),
        ):
            plot_band(ax, record, name, style, colour, marker, f"{name} ({label})")
    ax.set_yscale("log")
    axis_tokens(ax)
    ax.set_ylabel("microseconds (slowest rank's median)")
    ax.set_title("layout: creating a handle (not part of a step)")
    ax.legend(fontsize=7)


def plot_latency(plt, runs, path):
    layout = has_metric(runs, "ours.api.layout") or has_metric(runs, "ours.kernel.layout")
    panels = 4 if layout else 3
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 5.5))
    for ax, op in zip(axes, ("dispatch", "combine", "step")):
        for i, (label, record) in enumerate(runs):
            style = FILE_STYLES[i % len(FILE_STYLES)]
            for who in WHO:
                plot_band(
                    ax,
                    record,
                    f"{who}.kernel.{op}",
                    style,
                    WHO_COLOURS[who],
                    "o",
                    f"{who_label(who, record)} ({label})",
                )
            for extra, colour in ((f"ours.api.{op}", "tab:purple"), (f"ours.graph.{op}", "tab:orange")):
                xs, ys = series(record, extra)
                if xs:
                    ax.plot(xs, ys, style, marker="x", color=colour, label=f"{extra} ({label})")
        ax.set_yscale("log")
        axis_tokens(ax)
        ax.set_ylabel("microseconds (slowest rank's median)")
        ax.set_title(op if op != "step" else "dispatch + combine")
        ax.legend(fontsize=7)
    if layout:
        plot_layout(axes[3], runs)
    stamp(fig, [r for _, r in runs])
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bandwidth(plt, runs, path):
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    for ax, op in zip(axes, ("dispatch", "combine")):
        for i, (label, record) in enumerate(runs):
            style = FILE_STYLES[i % len(FILE_STYLES)]
            for name, field, colour, marker in (
                (f"ours.{op}", "logical_GBps", "tab:blue", "o"),
                (f"ours.{op}", "wire_GBps", "tab:cyan", "s"),
                (f"baseline.{op}", "logical_GBps", "tab:red", "o"),
                (f"ceiling.{op}", "wire_GBps", "tab:green", "s"),
                (f"ceiling_budget.{op}", "wire_GBps", "tab:olive", "s"),
            ):
                xs, ys = bandwidth_series(record, name, field)
                if xs:
                    kind = field.split("_")[0]
                    who = who_label(name.split(".")[0], record)
                    ax.plot(xs, ys, style, marker=marker, color=colour, label=f"{who} {op} {kind} ({label})")
            peak = record.get("ceiling_peak")
            if peak:
                ax.axhline(
                    peak["egress_GBps"],
                    linestyle=style,
                    color="grey",
                    label=f"peak ceiling {peak['egress_GBps']:.0f} GB/s ({label})",
                )
        axis_tokens(ax)
        ax.set_ylabel("GB/s per GPU")
        modes = {record["config"]["mode"] for _, record in runs}
        rule = {"ll": "a row per (token, expert)", "ht": "a row per (token, destination rank)"}
        rules = "; ".join(f"{MODE_NAMES.get(m, m)}: {rule.get(m, '?')}" for m in sorted(modes))
        ax.set_title(f"{op}: logical and wire bandwidth\nlogical (DeepEP's rule), {rules}", fontsize=10)
        ax.legend(fontsize=7)
    stamp(fig, [r for _, r in runs])
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="epcomm-bench JSON records")
    parser.add_argument("--out", help="directory for the PNGs (default: the first file's)")
    parser.add_argument(
        "--name", help="base name of the PNGs (default: the input's name, or 'comparison' for several files)"
    )
    args = parser.parse_args(argv)
    runs = []
    for path in args.files:
        try:
            record = bench_json.load(path)
        except (OSError, bench_json.FormatError) as e:
            sys.exit(f"plot.py: {e}")
        if not record["points"]:
            sys.exit(f"plot.py: {path} holds no measured point")
        runs.append((label_of(path, record, len(args.files) > 1), record))
    plt = import_pyplot()
    out = args.out or os.path.dirname(os.path.abspath(args.files[0]))
    os.makedirs(out, exist_ok=True)
    name = args.name or (os.path.splitext(os.path.basename(args.files[0]))[0] if len(args.files) == 1 else "comparison")
    written = []
    for suffix, draw in (("latency", plot_latency), ("bandwidth", plot_bandwidth)):
        path = os.path.join(out, f"{name}-{suffix}.png")
        draw(plt, runs, path)
        written.append(path)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
