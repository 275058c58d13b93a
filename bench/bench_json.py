# SPDX-License-Identifier: Apache-2.0
"""Reading epcomm-bench JSON records (format "epcomm-bench/9" and the older "/8", "/7", "/6", "/5",
"/4", "/3", "/2" and "/1", documented in bench/JSON.md).

load() checks the structure before anyone plots or compares it, and names the first thing
that is wrong, so a truncated or hand-edited file fails with a message instead of a chart
with holes. Standard library only.
"""

import json
import re

FORMAT = "epcomm-bench/9"
# /2 adds keys (below) and the ceiling_budget subject; /3 adds virtual nodes and the NVLink /
# network split of the wire bytes; /4 the mean of every summary and the CUPTI kernel spans; /5
# the HT receive window and the rows it dropped; /6 the layout and payload options; /7 the
# plan's window beside the group's; /8 whether each point's tokens bound its steps; /9 whether
# each step started with a cold L2.
FORMATS = (
    "epcomm-bench/1",
    "epcomm-bench/2",
    "epcomm-bench/3",
    "epcomm-bench/4",
    "epcomm-bench/5",
    "epcomm-bench/6",
    "epcomm-bench/7",
    "epcomm-bench/8",
    FORMAT,
)
METRIC_NAME = re.compile(
    r"^(ours|baseline|ceiling|ceiling_budget)\."
    r"(kernel|api|graph|cupti|cupti_graph|phase)\.[a-z_]+$"
)
SUMMARY_KEYS = ("median_us", "p10_us", "p90_us", "samples", "slowest_rank", "per_rank_median_us")
BYTES_KEYS = (
    "selections",
    "logical_dispatch",
    "logical_combine",
    "wire_dispatch",
    "wire_combine",
    "baseline_wire_dispatch",
    "baseline_wire_combine",
)
TOP_KEYS = (
    "format",
    "format_sample",
    "complete",
    "created_utc",
    "command",
    "config",
    "machine",
    "group",
    "wire_format",
    "ceiling_peak",
    "points",
)
CONFIG_KEYS = (
    "mode",
    "ranks",
    "tokens_per_rank",
    "max_tokens_per_rank",
    "hidden",
    "topk",
    "experts",
    "local_experts",
    "dtype",
    "fp8_pow2_scales",
    "sms",
    "routing",
    "warmup",
    "iters",
    "graph",
    "graph_replays",
    "send_only",
    "baseline",
    "ceiling",
    "ceiling_peak_bytes_per_peer",
)
# Required from format /2 on.
BYTES_KEYS_2 = ("token_ranks", "received_tokens", "wire_layout")
CONFIG_KEYS_2 = ("ht_sizing", "large_from", "large_warmup", "large_iters")
POINT_KEYS_2 = ("warmup", "iters")
# Required from format /3 on; each split sums to its wire_* total, rank by rank.
WIRE_SPLITS = ("wire_dispatch", "wire_combine", "wire_layout")
BYTES_KEYS_3 = tuple(f"{total}_{path}" for total in WIRE_SPLITS for path in ("nvlink", "network"))
CONFIG_KEYS_3 = ("virtual_node_size", "nodes")
# Required from format /4 on.
SUMMARY_KEYS_4 = ("mean_us",)
TOP_KEYS_4 = ("cupti", "floor", "memory_copy")
BYTES_KEYS_4 = ("memory_dispatch", "memory_combine")
POINT_KEYS_4 = ("roofline",)
ROOFLINE_KEYS = ("memory_bytes", "wire_bytes", "memory_us", "wire_us", "us")
CONFIG_KEYS_4 = ("cupti", "phase_trace")
CUPTI_KEYS = ("active", "library", "why_not")
# Required from format /5 on.
CONFIG_KEYS_5 = ("capacity_factor", "overflow", "recv_capacity")
POINT_KEYS_5 = ("dropped_rows",)
# Required from format /6 on, with the values the bench's options take.
CONFIG_CHOICES_6 = {
    "layout": ("default", "expert-padded", "expert-packed", "rank-major", "flat"),
    "weights_at": ("none", "dispatch", "combine"),
    "quant": ("none", "fp8", "passthrough"),
    "payload": ("e4m3", "e2m1"),
    "scales": ("fp32", "fp32-colmajor", "bf16", "ue8m0", "ue8m0-packed", "ue8m0-packed-rowmajor", "uint8"),
}
CONFIG_COUNTS_6 = ("alignment", "scale_count")
MACHINE_KEYS = (
    "hostname",
    "gpus",
    "nccl_runtime",
    "nccl_headers",
    "nccl_library",
    "cuda_driver",
    "cuda_runtime",
    "nvidia_driver",
    "epcomm_abi",
)
MACHINE_KEYS_4 = ("epcomm_commit",)


class FormatError(ValueError):
    pass


def _need(obj, keys, where):
    if not isinstance(obj, dict):
        raise FormatError(f"{where}: expected an object, got {type(obj).__name__}")
    for key in keys:
        if key not in obj:
            raise FormatError(f"{where}: missing key '{key}'")


def _number(value, where, nullable=False):
    if value is None and nullable:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormatError(f"{where}: expected a number, got {value!r}")


def _summary(obj, where, ranks, version):
    v4 = version >= 4
    _need(obj, SUMMARY_KEYS + (SUMMARY_KEYS_4 if v4 else ()), where)
    for key in ("median_us", "p10_us", "p90_us") + (SUMMARY_KEYS_4 if v4 else ()):
        _number(obj[key], f"{where}.{key}")
    if not obj["p10_us"] <= obj["median_us"] <= obj["p90_us"]:
        raise FormatError(f"{where}: p10 <= median <= p90 does not hold")
    if not isinstance(obj["per_rank_median_us"], list) or len(obj["per_rank_median_us"]) != ranks:
        raise FormatError(f"{where}.per_rank_median_us: expected {ranks} values")


def check(record):
    """Raises FormatError naming the first problem; returns the record otherwise."""
    _need(record, TOP_KEYS, "record")
    if record["format"] not in FORMATS:
        raise FormatError(f"record.format is {record['format']!r}; this reader knows {', '.join(FORMATS)}")
    version = FORMATS.index(record["format"]) + 1
    v2, v3, v4, v5, v6 = version >= 2, version >= 3, version >= 4, version >= 5, version >= 6
    if version >= 8 and not isinstance(record["config"].get("step_bound"), bool):
        raise FormatError("config.step_bound: expected true or false")
    if version >= 9 and not isinstance(record["config"].get("cold_l2"), bool):
        raise FormatError("config.cold_l2: expected true or false")
    if version >= 7:
        planned = record["group"].get("planned_symmetric_bytes_per_gpu")
        if isinstance(planned, bool) or not isinstance(planned, int) or planned < 0:
            raise FormatError("group.planned_symmetric_bytes_per_gpu: expected a byte count (an integer >= 0)")
    _need(record, TOP_KEYS_4 if v4 else (), "record")
    _need(
        record["config"],
        CONFIG_KEYS
        + (CONFIG_KEYS_2 if v2 else ())
        + (CONFIG_KEYS_3 if v3 else ())
        + (CONFIG_KEYS_4 if v4 else ())
        + (CONFIG_KEYS_5 if v5 else ())
        + ((*CONFIG_CHOICES_6, *CONFIG_COUNTS_6) if v6 else ()),
        "config",
    )
    if v6:
        for key, choices in CONFIG_CHOICES_6.items():
            if record["config"][key] not in choices:
                raise FormatError(f"config.{key} is {record['config'][key]!r}; expected one of {', '.join(choices)}")
        for key in CONFIG_COUNTS_6:
            value = record["config"][key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise FormatError(f"config.{key}: expected a count (an integer >= 0)")
    if v5:
        config = record["config"]
        ht = config["mode"] == "ht"
        factor, window = config["capacity_factor"], config["recv_capacity"]
        if ht != (config["overflow"] in ("fail", "drop")) or (not ht and config["overflow"] != "none"):
            raise FormatError("config.overflow: expected fail or drop (ht), none (ll)")
        if ht and (
            isinstance(factor, bool)
            or not isinstance(factor, (int, float))
            or not 0 < factor <= 1
            or not isinstance(window, int)
            or window < 1
        ):
            raise FormatError("config: expected capacity_factor in (0, 1] and a positive recv_capacity (ht)")
        if not ht and (factor is not None or window is not None):
            raise FormatError("config: capacity_factor and recv_capacity are null with --mode=ll")
    if v4:
        cupti = record["cupti"]
        _need(cupti, CUPTI_KEYS, "cupti")
        if (
            not isinstance(cupti["active"], bool)
            or (cupti["library"] is None) == cupti["active"]
            or (cupti["why_not"] is None) != cupti["active"]
        ):
            raise FormatError("cupti: expected a library when active and a reason (why_not) when not")
    _need(record["machine"], MACHINE_KEYS + (MACHINE_KEYS_4 if v4 else ()), "machine")
    ranks = record["config"]["ranks"]
    if not isinstance(ranks, int) or ranks < 1:
        raise FormatError("config.ranks: expected a positive integer")
    if v4 and record["memory_copy"] is not None:
        _need(record["memory_copy"], ("bytes", "time", "copy_GBps"), "memory_copy")
        _summary(record["memory_copy"]["time"], "memory_copy.time", ranks, version)
    if v4 and record["floor"] is not None:
        _need(record["floor"], ("blocks", "threads", "call", "step"), "floor")
        # routed_row and the graph floor came later within version 4: records written before
        # them lack them.
        for key in ("call", "step", "routed_row", "graph_call", "graph_step"):
            if key in record["floor"]:
                _summary(record["floor"][key], f"floor.{key}", ranks, version)
    if v3:
        node_size, nodes = record["config"]["virtual_node_size"], record["config"]["nodes"]
        if (
            not isinstance(nodes, int)
            or nodes < 1
            or not isinstance(node_size, int)
            or node_size < 0
            or (node_size > 0 and node_size * nodes != ranks)
        ):
            raise FormatError(
                f"config: virtual_node_size {node_size!r} and nodes {nodes!r} do not fit "
                f"{ranks} ranks (nodes = ranks / virtual_node_size)"
            )
    if record["ceiling_peak"] is not None:
        _need(record["ceiling_peak"], ("bytes_per_peer", "peers", "time", "egress_GBps"), "ceiling_peak")
        _summary(record["ceiling_peak"]["time"], "ceiling_peak.time", ranks, version)
    if not isinstance(record["points"], list):
        raise FormatError("points: expected a list")
    for i, point in enumerate(record["points"]):
        where = f"points[{i}]"
        _need(
            point,
            ("tokens_per_rank", "output_checked", "bytes", "times", "bandwidth", "ratios")
            + (POINT_KEYS_2 if v2 else ())
            + (POINT_KEYS_4 if v4 else ())
            + (POINT_KEYS_5 if v5 else ()),
            where,
        )
        if v5 and (
            not isinstance(point["dropped_rows"], list)
            or len(point["dropped_rows"]) != ranks
            or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in point["dropped_rows"])
        ):
            raise FormatError(f"{where}.dropped_rows: expected {ranks} non-negative integers")
        bytes_keys = (
            BYTES_KEYS + (BYTES_KEYS_2 if v2 else ()) + (BYTES_KEYS_3 if v3 else ()) + (BYTES_KEYS_4 if v4 else ())
        )
        _need(point["bytes"], bytes_keys, f"{where}.bytes")
        for key in bytes_keys:
            values = point["bytes"][key]
            if not isinstance(values, list) or len(values) != ranks:
                raise FormatError(f"{where}.bytes.{key}: expected {ranks} values")
        for total in WIRE_SPLITS if v3 else ():
            b = point["bytes"]
            if any(n + w != t for n, w, t in zip(b[f"{total}_nvlink"], b[f"{total}_network"], b[total])):
                raise FormatError(f"{where}.bytes: {total}_nvlink + {total}_network is not {total}")
        for name, summary in point["times"].items():
            if not METRIC_NAME.match(name):
                raise FormatError(f"{where}.times: unknown metric name {name!r}")
            _summary(summary, f"{where}.times.{name}", ranks, version)
        for name, bw in point["bandwidth"].items():
            _need(bw, ("logical_GBps", "wire_GBps", "wire_over_ceiling"), f"{where}.bandwidth.{name}")
            for key, value in bw.items():
                _number(value, f"{where}.bandwidth.{name}.{key}", nullable=True)
        for name, value in point["ratios"].items():
            _number(value, f"{where}.ratios.{name}", nullable=True)
        if v4:
            roof = point["roofline"]
            _need(roof, ("dispatch", "combine", "step_us"), f"{where}.roofline")
            for op in ("dispatch", "combine"):
                _need(roof[op], ROOFLINE_KEYS, f"{where}.roofline.{op}")
                for key in ROOFLINE_KEYS:
                    _number(roof[op][key], f"{where}.roofline.{op}.{key}", nullable=key.endswith("_us"))
            _number(roof["step_us"], f"{where}.roofline.step_us", nullable=True)
    return record


def load(path):
    with open(path, encoding="utf-8") as f:
        try:
            record = json.load(f)
        except json.JSONDecodeError as e:
            raise FormatError(f"{path}: not JSON: {e}") from None
    try:
        return check(record)
    except FormatError as e:
        raise FormatError(f"{path}: {e}") from None


def median(point, name):
    """The slowest rank's median of metric `name` in microseconds, or None."""
    summary = point["times"].get(name)
    return None if summary is None else summary["median_us"]
