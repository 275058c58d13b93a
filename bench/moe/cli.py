# SPDX-License-Identifier: Apache-2.0
"""moe_layer.py's command line, and where it finds libepcomm. Needs no torch."""

import argparse
import os

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
BINDINGS = os.path.join(ROOT, "bindings", "python")

DESCRIPTION = "A real MoE layer on epcomm, checked against one GPU and timed against torch."
# EpcGroupConfig.max_tokens_per_rank's limit on a high-throughput group.
HT_MAX_TOKENS = 65536


def token_list(parser, flag, text, allow_empty=False, at_most=None):
    """Comma-separated token counts of `flag`, each at least 1 (and at most `at_most`);
    an empty text is the empty list where `allow_empty`."""
    if allow_empty and not text.strip():
        return []
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        parser.error(f"{flag}: expected comma-separated integers, got {text!r}")
    if any(t < 1 for t in values):
        parser.error(f"{flag}: every value must be at least 1")
    if at_most is not None and any(t > at_most for t in values):
        parser.error(f"{flag}: every value must be at most {at_most}")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=DESCRIPTION)
    p.add_argument("--gpus", type=int, default=0, help="ranks (default: every visible GPU)")
    p.add_argument(
        "--tokens",
        default="1,4,16,64,128",
        help="decode sizes: tokens per rank on the low-latency path, comma-separated (default: %(default)s)",
    )
    p.add_argument(
        "--prefill-tokens",
        default="1024,4096",
        help="prefill sizes: tokens per rank on the high-throughput path, "
        "comma-separated; '' skips them (default: %(default)s)",
    )
    p.add_argument(
        "--ht-sms", type=int, default=24, help="SM budget (num_sms) of the high-throughput group (default: %(default)s)"
    )
    p.add_argument(
        "--ht-alignment",
        type=int,
        default=128,
        help="rows each local expert's zone of the high-throughput layout is aligned to (default: %(default)s)",
    )
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=1024, help="expert intermediate size")
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--topk", type=int, default=6)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--tolerance", type=float, default=2e-2, help="max |out - reference| / max |reference| allowed (bf16 layer)"
    )
    p.add_argument("--out", help="write the figures as JSON here")
    args = p.parse_args(argv)
    args.token_list = token_list(p, "--tokens", args.tokens)
    args.prefill_list = token_list(p, "--prefill-tokens", args.prefill_tokens, allow_empty=True, at_most=HT_MAX_TOKENS)
    if args.ht_sms < 1:
        p.error("--ht-sms must be at least 1")
    if args.ht_alignment < 1:
        p.error("--ht-alignment must be at least 1")
    if args.hidden % 8:
        p.error("--hidden must be a multiple of 8")
    return args


def recorded_config(args):
    """The flags as the JSON record keeps them (the parsed lists are derived)."""
    return {k: v for k, v in vars(args).items() if k not in ("token_list", "prefill_list")}


def find_library():
    if os.environ.get("EPCOMM_LIB"):
        return os.environ["EPCOMM_LIB"]
    for candidate in (".gpu", "build"):
        path = os.path.join(ROOT, candidate, "capi", "libepcomm.so.2")
        if os.path.exists(path):
            return path
    return None
