#!/usr/bin/env python3
"""Charts from epcomm-bench JSON records (bench/JSON.md).

    python3 bench/plot.py RUN.json [MORE.json ...] [--out DIR]

Writes two PNGs into DIR (default: the first file's directory), named after the input when
there is one file and "comparison" otherwise:
  <name>-latency.png    dispatch, combine and both, against tokens per rank: ours, the NCCL
                        baseline and the LSA copy ceiling (median of the slowest rank, with
                        its p10-p90 band), plus ours through the API and graph replay if
                        measured;
  <name>-bandwidth.png  GB/s per GPU against tokens per rank: ours logical and wire, the
                        baseline's logical, the ceiling's wire, and the run's peak ceiling.
Several files are drawn side by side (one line style per file). A format sample
(format_sample: true) is stamped as such on every chart.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

WHO_COLOURS = {"ours": "tab:blue", "baseline": "tab:red", "ceiling": "tab:green"}
FILE_STYLES = ["-", "--", ":", "-."]
SAMPLE_STAMP = "FORMAT SAMPLE: invented numbers, not a measurement"


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot.py: matplotlib is not installed: python3 -m pip install matplotlib "
                 "(tools/dev.sh installs it)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def label_of(path, record, several):
    gpus = record["machine"]["gpus"]
    base = f"{len(gpus)}x {gpus[0]['name']}" if gpus else "?"
    return f"{os.path.basename(path)}: {base}" if several else base


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
    if any(r["format_sample"] for r in records):
        fig.text(0.5, 0.5, "FORMAT SAMPLE", fontsize=60, color="grey", alpha=0.25, ha="center",
                 va="center", rotation=25)
        fig.suptitle(SAMPLE_STAMP, color="darkred", fontweight="bold")


def axis_tokens(ax):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per rank")
    ax.grid(True, which="both", alpha=0.3)


def plot_latency(plt, runs, path):
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    for ax, op in zip(axes, ("dispatch", "combine", "step")):
        for i, (label, record) in enumerate(runs):
            style = FILE_STYLES[i % len(FILE_STYLES)]
            for who in ("ours", "baseline", "ceiling"):
                name = f"{who}.kernel.{op}"
                xs, ys = series(record, name)
                if not xs:
                    continue
                _, lo = series(record, name, "p10_us")
                _, hi = series(record, name, "p90_us")
                ax.plot(xs, ys, style, marker="o", color=WHO_COLOURS[who], label=f"{who} ({label})")
                ax.fill_between(xs, lo, hi, color=WHO_COLOURS[who], alpha=0.15)
            for extra, colour in ((f"ours.api.{op}", "tab:purple"), (f"ours.graph.{op}", "tab:orange")):
                xs, ys = series(record, extra)
                if xs:
                    ax.plot(xs, ys, style, marker="x", color=colour, label=f"{extra} ({label})")
        ax.set_yscale("log")
        axis_tokens(ax)
        ax.set_ylabel("microseconds (slowest rank's median)")
        ax.set_title(op if op != "step" else "dispatch + combine")
        ax.legend(fontsize=7)
    stamp(fig, [r for _, r in runs])
    fig.tight_layout(rect=(0, 0, 1, 0.95))
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
                    (f"ceiling.{op}", "wire_GBps", "tab:green", "s")):
                xs, ys = bandwidth_series(record, name, field)
                if xs:
                    kind = field.split("_")[0]
                    ax.plot(xs, ys, style, marker=marker, color=colour, label=f"{name} {kind} ({label})")
            peak = record.get("ceiling_peak")
            if peak:
                ax.axhline(peak["egress_GBps"], linestyle=style, color="grey",
                           label=f"peak ceiling {peak['egress_GBps']:.0f} GB/s ({label})")
        axis_tokens(ax)
        ax.set_ylabel("GB/s per GPU")
        ax.set_title(f"{op}: logical (DeepEP's rule) and wire bandwidth")
        ax.legend(fontsize=7)
    stamp(fig, [r for _, r in runs])
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="epcomm-bench JSON records")
    parser.add_argument("--out", help="directory for the PNGs (default: the first file's)")
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
    name = os.path.splitext(os.path.basename(args.files[0]))[0] if len(args.files) == 1 else "comparison"
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
