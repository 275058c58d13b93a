#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Proves check_julia.py can fail: runs it on deliberately broken copies of EpComm.jl.

Each case copies the package to a temporary directory, applies one edit (a wrong argument
count, a wrong type, a missing wrapper, a wrong struct field type, ...), runs the checker on
the copy and requires exit status 1 and the expected message. The unbroken copy must pass.
Python 3 and tree-sitter-julia (julia_treesitter.py); run by `meson test --suite bindings` (julia-static-selftest).

    selftest_check_julia.py [--keep DIR]   # --keep: leave the broken copies in DIR
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "EpComm.jl"
LIB = "src/LibEpComm.jl"

# (name, file, text to replace, replacement, message the checker must print)
CASES = [
    # Syntax the hand-written lexer accepted; the tree-sitter-julia gate must reject it.
    (
        "an operator with no left operand",
        "src/dtypes.jl",
        "# SPDX-License-Identifier: Apache-2.0\n",
        "# SPDX-License-Identifier: Apache-2.0\nx = 1 + * 2\n",
        "(tree-sitter-julia): x = 1 + * 2",
    ),
    (
        "a struct field with no type after ::",
        "src/dtypes.jl",
        "# SPDX-License-Identifier: Apache-2.0\n",
        "# SPDX-License-Identifier: Apache-2.0\nstruct S a:: end\n",
        "(tree-sitter-julia): struct S a:: end",
    ),
    (
        "wrong argument count",
        LIB,
        "out_plan::Ptr{EpcPlan})::EpcStatus",
        ")::EpcStatus",
        "epc_plan_query is called with 4 arguments; C declares 5",
    ),
    (
        "wrong argument type",
        LIB,
        "nranks::Int32, lsa_size::Int32",
        "nranks::Int64, lsa_size::Int32",
        "epc_plan_query argument 2 (nranks, C int32_t): C int32_t must be Cint or Int32, not Int64",
    ),
    (
        "Cstring for a buffer the library writes",
        LIB,
        "buf::Ptr{UInt8}",
        "buf::Cstring",
        "a buffer it writes is Ptr{UInt8}",
    ),
    (
        "wrong pointee type",
        LIB,
        "out_info::Ptr{EpcGroupInfo}",
        "out_info::Ptr{EpcPlan}",
        "C EpcGroupInfo must be EpcGroupInfo, not EpcPlan",
    ),
    (
        "wrong return type",
        LIB,
        "stream::Ptr{Cvoid})::EpcStatus",
        "stream::Ptr{Cvoid})::UInt32",
        "epc_group_barrier returns C EpcStatus",
    ),
    (
        "missing wrapper",
        LIB,
        "function epc_group_barrier(group, stream)\n"
        "    @ccall libepcomm().epc_group_barrier(group::Ptr{EpcGroup}, stream::Ptr{Cvoid})::EpcStatus\n"
        "end\n",
        "",
        "epc_group_barrier (EpcStatus epc_group_barrier(EpcGroup* group, void* stream)) has no wrapper",
    ),
    (
        "wrapper passes its arguments out of order",
        LIB,
        "epc_group_query(group::Ptr{EpcGroup}, out_info::Ptr{EpcGroupInfo})",
        "epc_group_query(out_info::Ptr{EpcGroup}, group::Ptr{EpcGroupInfo})",
        "it must pass its parameters in order",
    ),
    (
        "call through another library",
        LIB,
        "@ccall libepcomm().epc_comm_destroy(",
        '@ccall "libepcomm".epc_comm_destroy(',
        "epc_comm_destroy is called through the library",
    ),
    (
        "wrong struct field type, same layout",
        LIB,
        "    num_experts::UInt32  # required",
        "    num_experts::Int32  # required",
        "EpcGroupConfig.num_experts (C uint32_t): C uint32_t must be Cuint or UInt32, not Int32",
    ),
    (
        "wrong struct field type, other layout",
        LIB,
        "    hidden::UInt32  # required",
        "    hidden::UInt64  # required",
        "EpcGroupConfig.max_tokens_per_rank is at offset 24 with size 4; the snapshot says offset 20",
    ),
    (
        "wrong fixed-array length",
        LIB,
        "name::NTuple{32, UInt8}",
        "name::NTuple{31, UInt8}",
        "NTuple length 31; C declares [32] = 32",
    ),
    (
        "mutable struct for a C struct",
        LIB,
        "\nstruct EpcPlanRegion\n",
        "\nmutable struct EpcPlanRegion\n",
        "EpcPlanRegion must be an immutable struct",
    ),
    (
        "wrong constant value",
        LIB,
        "const EPC_ERR_TIMEOUT = EpcStatus(7)",
        "const EPC_ERR_TIMEOUT = EpcStatus(8)",
        "EPC_ERR_TIMEOUT is 8; the header says 7",
    ),
    (
        "typedef written as another typedef",
        LIB,
        "    dtype::EpcDtype\n",
        "    dtype::EpcMode\n",
        "written as EpcMode but C declares EpcDtype",
    ),
    (
        "safe layer passes too few arguments",
        "src/plan.jl",
        "epc_plan_query(Ref(c_config(config)), nranks, lsa_size, num_nodes, plan)",
        "epc_plan_query(Ref(c_config(config)), nranks, lsa_size, plan)",
        "epc_plan_query is called with 4 arguments; C declares 5",
    ),
    (
        "safe layer names an unknown constant",
        "src/plan.jl",
        "EPC_SLOT_NONE",
        "EPC_SLOT_NOTHING",
        "EPC_SLOT_NOTHING is not a constant of epcomm.h",
    ),
    (
        "mirrored struct field missing in C",
        "src/group.jl",
        "    local_experts::Int\n",
        "    local_expert_count::Int\n",
        "GroupInfo.local_expert_count is copied by name from EpcGroupInfo, which has no field",
    ),
    (
        "C struct field the mirror leaves out",
        "src/config.jl",
        "    virtual_node_size::UInt32\n",
        "",
        "EpcGroupConfig.virtual_node_size has no field in GroupConfig",
    ),
    (
        "struct built with an unknown field",
        "src/tensor.jl",
        "c_struct(EpcTensor; data, dtype, ndim,",
        "c_struct(EpcTensor; data, dtype, rank = ndim,",
        "c_struct(EpcTensor; rank = ...): EpcTensor has no field rank",
    ),
    (
        "direct ccall of a function the header lacks",
        "src/errors.jl",
        "status_string(status::Integer) = unsafe_string(epc_status_string(status))",
        "status_string(status::Integer) = unsafe_string(@ccall libepcomm().epc_status_name(status::Int32)::Cstring)",
        "@ccall calls epc_status_name, which epcomm.h does not declare",
    ),
    (
        "a block without its end",
        "src/comm.jl",
        "    comm.handle = C_NULL\n    return nothing\nend\n",
        "    comm.handle = C_NULL\n    return nothing\n",
        "is never closed by `end`",
    ),
    (
        "the library's location not read from Preferences.jl",
        "src/library.jl",
        "load_preference(@__MODULE__, LIBRARY_PREFERENCE, DEFAULT_LIBRARY)",
        "DEFAULT_LIBRARY",
        "nothing in src/ calls load_preference",
    ),
    (
        "Preferences without its compat entry",
        "Project.toml",
        'Preferences = "1"\n',
        "",
        '[compat] Preferences must be "1"',
    ),
    (
        "non-stdlib dependency",
        "Project.toml",
        "[deps]\n",
        '[deps]\nJSON = "682c06a0-de6a-54ab-a142-c8b1cf79cde6"\n',
        "[deps] JSON = '682c06a0-de6a-54ab-a142-c8b1cf79cde6' is not a known standard library",
    ),
    (
        "wrong CUDA UUID",
        "Project.toml",
        'CUDA = "052768ef-5323-5732-b1bb-66c8b64840ba"',
        'CUDA = "052768ef-5323-5732-b1bb-66c8b64840bb"',
        "[weakdeps] must be exactly CUDA",
    ),
    ("julia compat before extensions", "Project.toml", 'julia = "1.9"', 'julia = "1.6"', "allows Julia before 1.9"),
    (
        "export of an undefined name",
        "src/EpComm.jl",
        "plan_query, Group,",
        "plan_query, make_group, Group,",
        "`export make_group`, but src/ defines no make_group",
    ),
    (
        "README example calls a name EpComm lacks",
        "README.md",
        "info = EpComm.info(group)",
        "info = EpComm.group_info(group)",
        "README example uses EpComm.group_info, which src/ does not define",
    ),
    (
        "a header function the safe layer never calls",
        "src/handle.jl",
        "        check(epc_combine(handle(h), Ref(args), stream_pointer(stream)), :epc_combine)\n",
        "        nothing\n",
        "epcomm.h declares epc_combine",
    ),
    (
        "safe layer completes without the flags",
        "src/handle.jl",
        "epc_complete(handle(h), UInt32(0), stream_pointer(stream))",
        "epc_complete(handle(h), stream_pointer(stream))",
        "epc_complete is called with 2 arguments; C declares 3",
    ),
    (
        "dispatch args built with an unknown field",
        "src/handle.jl",
        "quant = quant_code(quant), scale_block,",
        "quant = quant_code(quant), block = scale_block,",
        "extensible(EpcDispatchArgs; block = ...): EpcDispatchArgs has no field block",
    ),
    (
        "a handle-info field the mirror leaves out",
        "src/handle.jl",
        "    overflow_rows::Int\n",
        "",
        "EpcHandleInfo.overflow_rows has no field in HandleInfo",
    ),
    (
        "flags passed as a plain integer type",
        LIB,
        "epc_complete(handle::Ptr{EpcHandle}, flags::UInt32,",
        "epc_complete(handle::Ptr{EpcHandle}, flags::Int32,",
        "epc_complete argument 2 (flags, C uint32_t)",
    ),
    (
        "a handle passed where C takes a group",
        LIB,
        "epc_handle_create(group::Ptr{EpcGroup},",
        "epc_handle_create(group::Ptr{EpcHandle},",
        "C EpcGroup must be EpcGroup, not EpcHandle",
    ),
    (
        "a deliberately unwrapped function is called",
        "src/library.jl",
        "function load_library!()",
        "probe_table(table) = epc_get_api(EPC_ABI_MAJOR, table)\n\nfunction load_library!()",
        "epc_get_api is called, but source_checks.UNWRAPPED",
    ),
    (
        "__init__ ignores EPCOMM_LIB",
        "src/library.jl",
        'get(ENV, "EPCOMM_LIB", load_preference(@__MODULE__, LIBRARY_PREFERENCE, DEFAULT_LIBRARY))',
        "load_preference(@__MODULE__, LIBRARY_PREFERENCE, DEFAULT_LIBRARY)",
        'nothing in src/ reads ENV["EPCOMM_LIB"]',
    ),
    # Forms the checks read from the syntax tree (julia_forms.py): each must be read, or
    # reported when it cannot be, never skipped.
    (
        "a ccall (not @ccall) with a wrong argument type",
        LIB,
        "@ccall libepcomm().epc_group_barrier(group::Ptr{EpcGroup}, stream::Ptr{Cvoid})::EpcStatus",
        "ccall((:epc_group_barrier, libepcomm()), EpcStatus, (Ptr{EpcGroup}, UInt64), group, stream)",
        "epc_group_barrier argument 2 (stream, C void*)",
    ),
    (
        "a @ccall with variadic arguments",
        LIB,
        "epc_group_barrier(group::Ptr{EpcGroup}, stream::Ptr{Cvoid})",
        "epc_group_barrier(group::Ptr{EpcGroup}; stream::Ptr{Cvoid})",
        "epc_group_barrier is not variadic in C",
    ),
    (
        "a @ccall through a function pointer",
        LIB,
        "@ccall libepcomm().epc_group_barrier(",
        "@ccall $(Libdl.dlsym(Libdl.dlopen(libepcomm()), :epc_group_barrier))(",
        "through a function pointer",
    ),
    (
        "a @ccall argument with no type",
        LIB,
        "epc_group_barrier(group::Ptr{EpcGroup}, stream::Ptr{Cvoid})",
        "epc_group_barrier(group::Ptr{EpcGroup}, stream)",
        "argument 'stream' has no ::Type",
    ),
    (
        "a @ccall with no return type",
        LIB,
        "stream::Ptr{Cvoid})::EpcStatus",
        "stream::Ptr{Cvoid})",
        "missing ::ReturnType",
    ),
    (
        "a C struct field with no type",
        LIB,
        "    kind::EpcRegionKind\n",
        "    kind\n",
        "struct EpcPlanRegion: cannot parse the field 'kind'",
    ),
    (
        "a constant that is not an integer literal",
        LIB,
        "const EPC_ERR_TIMEOUT = EpcStatus(7)",
        "const EPC_ERR_TIMEOUT = EpcStatus(3 + 4)",
        "EPC_ERR_TIMEOUT must be `const EPC_ERR_TIMEOUT = T(7)` with an integer literal",
    ),
    (
        "the library path set only in a comment",
        "src/library.jl",
        "    libepcomm_path[] = path\n",
        "    # libepcomm_path[] = path\n",
        "nothing in src/ sets libepcomm_path[]",
    ),
    (
        "a LibEpComm name that does not exist",
        "src/errors.jl",
        "unsafe_string(epc_status_string(status))",
        "unsafe_string(LibEpComm.epc_status_text(status))",
        "LibEpComm.epc_status_text does not exist",
    ),
]


def run_checker(package: Path, extra=()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HERE / "check_julia.py"), "--package", str(package), *extra],
        capture_output=True,
        text=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", help="write the broken copies under this directory and keep them")
    args = parser.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="epcomm-julia-selftest-"))
    base.mkdir(parents=True, exist_ok=True)
    failures = 0
    try:
        clean = base / "unbroken"
        shutil.rmtree(clean, ignore_errors=True)
        shutil.copytree(PACKAGE, clean)
        for extra in ([], ["--fallback-toml"]):
            result = run_checker(clean, extra)
            passed = result.returncode == 0 and ("fallback parser)" in result.stdout or not extra)
            print(
                f"{'ok  ' if passed else 'FAIL'} unbroken copy passes{' with ' + ' '.join(extra) if extra else ''} (exit {result.returncode})"
            )
            if not passed:
                failures += 1
                print(result.stdout + result.stderr)
        for number, (name, relative, old, new, expected) in enumerate(CASES, start=1):
            copy = base / f"case{number:02d}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(PACKAGE, copy)
            target = copy / relative
            text = target.read_text(encoding="utf-8")
            if text.count(old) < 1:
                print(f"FAIL {name}: the text to break is not in {relative} (update this self-test)")
                failures += 1
                continue
            target.write_text(text.replace(old, new, 1), encoding="utf-8")
            result = run_checker(copy)
            output = result.stdout + result.stderr
            caught = result.returncode == 1 and expected in output and "Traceback" not in output
            failures += not caught
            line = next((l.strip() for l in output.splitlines() if expected in l), "")
            print(
                f"{'ok  ' if caught else 'FAIL'} {name} ({relative}): exit {result.returncode}; {line or output[-400:]}"
            )
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"selftest_check_julia: {len(CASES)} broken copies, {failures} not caught as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
