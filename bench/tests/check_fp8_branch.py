#!/usr/bin/env python3
"""The fp8 branch of bench/ll_mode.cpp compiles against a header that declares the coming
epc_ll_dispatch_fp8 (the issue's signature), so the day the library adds it the benchmark
needs no change. Until then the normal build only compiles the other branch.

    check_fp8_branch.py --cxx "g++ ..." --source-root DIR --cuda-include DIR
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

DECLARATION = """#define EPC_FLAG_FP8_POW2_SCALES 0x2u
EPC_API EpcStatus epc_ll_dispatch_fp8(EpcHandle* handle, const EpcTensor* x,
                                      const EpcTensor* topk_weights, const EpcTensor* out_x,
                                      const EpcTensor* out_scales, const EpcTensor* out_counts,
                                      EpcFlags flags, void* stream);
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cxx", required=True)
    parser.add_argument("--source-root", required=True)
    parser.add_argument("--cuda-include", required=True)
    args = parser.parse_args()
    header_path = os.path.join(args.source_root, "capi", "include", "epcomm", "epcomm.h")
    with open(header_path, encoding="utf-8") as f:
        header = f.read()
    if "EPC_FLAG_FP8_POW2_SCALES" in header:
        print("ok    the header declares epc_ll_dispatch_fp8 already; the normal build compiles the fp8 branch")
        return 0
    anchor = re.search(r"^#define EPC_FLAG_SEND_ONLY .*$", header, re.M)
    if anchor is None:
        print("FAIL  cannot find EPC_FLAG_SEND_ONLY in the header to add the fp8 declaration after")
        return 1
    patched = header[:anchor.end()] + "\n" + DECLARATION + header[anchor.end():]
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "epcomm"))
        with open(os.path.join(tmp, "epcomm", "epcomm.h"), "w", encoding="utf-8") as f:
            f.write(patched)
        command = shlex.split(args.cxx) + [
            "-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only",
            "-I" + tmp, "-I" + args.source_root, "-I" + args.cuda_include,
            os.path.join(args.source_root, "bench", "ll_mode.cpp")]
        p = subprocess.run(command, capture_output=True, text=True)
        if p.returncode != 0:
            print("FAIL  bench/ll_mode.cpp does not compile with epc_ll_dispatch_fp8 declared:\n" + p.stderr)
            return 1
        # The branch must really be there: without the macro the file must not mention the call.
        with open(os.path.join(args.source_root, "bench", "ll_mode.cpp"), encoding="utf-8") as f:
            if "epc_ll_dispatch_fp8(" not in f.read():
                print("FAIL  bench/ll_mode.cpp has no call of epc_ll_dispatch_fp8")
                return 1
    print("ok    bench/ll_mode.cpp compiles with epc_ll_dispatch_fp8 declared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
