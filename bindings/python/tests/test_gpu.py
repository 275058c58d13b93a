# SPDX-License-Identifier: Apache-2.0
"""GPU tests: groups on real GPUs, torch tensors, the README example.

They run only where torch sees CUDA devices and EPCOMM_TEST_GPUS=N asks for N of them;
otherwise each test is skipped with the reason. Run them with, e.g.,
    EPCOMM_TEST_GPUS=4 NCCL_NVLS_ENABLE=0 python3 -m pytest -q bindings/python/tests
"""

import os
import re
import subprocess
import sys
import time

import pytest

import epcomm
from gpu_support import TIMEOUT_S, requested_gpus, run_ranks


def test_group_on_every_gpu_one_thread_per_rank():
    nranks, torch = requested_gpus()
    config = epcomm.GroupConfig(num_experts=8 * nranks, hidden=2048)
    plan = epcomm.plan_query(config, nranks)
    uid = epcomm.UniqueId.create()
    shared = epcomm.UniqueId.from_hex(uid.hex())  # as another process would receive it
    infos = [None] * nranks

    def rank_main(rank):
        with epcomm.Comm.init(shared, nranks, rank, device=rank) as comm:
            group = epcomm.Group.create(comm, config)
            with pytest.raises(epcomm.EpcError, match="still open"):
                comm.close()  # refused locally: the group is built on it
            with group:
                infos[rank] = group.info()
                group.barrier()
                stream = torch.cuda.Stream(device=rank)
                group.barrier(stream)
                group.barrier(stream.cuda_stream)
                assert group.async_error() is None  # a healthy group
            assert group.closed
            with pytest.raises(epcomm.EpcError, match="closed"):
                group.async_error()

    run_ranks(nranks, rank_main)
    for rank, info in enumerate(infos):
        assert (info.rank, info.nranks, info.cuda_device) == (rank, nranks, rank)
        assert info.num_experts == 8 * nranks and info.local_experts == 8
        assert info.hidden == 2048 and info.mode == epcomm.Mode.LOW_LATENCY
        assert info.max_tokens_per_rank == 128 and info.max_token_bytes == 2 * 2048
        assert info.recv_capacity == nranks * 128 and info.overflow == epcomm.Overflow.FAIL
        assert info.max_pending_steps == 2 and info.flags == 0
        assert info.lsa_size * info.num_nodes == nranks
        if info.num_nodes == 1:
            assert info.symmetric_bytes == plan.symmetric_bytes
        assert info.symmetric_bytes > 0


def test_a_collected_open_handle_keeps_its_group_open():
    """A Handle collected without close() is leaked (its finalizer calls nothing), so the
    group no longer sees it, but the library still does: it refuses epc_group_destroy
    (INVALID_USAGE) and releases nothing. The group must stay open and working, its
    communicator refuse to close, and close() succeed once the leaked handle is gone."""
    import gc
    import warnings

    from epcomm import _library

    requested_gpus()
    with epcomm.Comm.init(epcomm.UniqueId.create(), 1, 0, device=0) as comm:
        group = epcomm.Group.create(comm, epcomm.GroupConfig(num_experts=8, hidden=2048))
        handle = epcomm.Handle.create(group, stream=0)
        pointer = handle._pointer  # noqa: SLF001
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            del handle
            gc.collect()
        with pytest.raises(epcomm.InvalidUsageError, match="live handle") as caught:
            group.close()
        assert caught.value.function == "epc_group_destroy"
        assert not group.closed
        group.barrier()  # the group goes on working
        with pytest.raises(epcomm.EpcError, match="still open"):
            comm.close()
        _library.call("epc_handle_destroy", pointer)
        group.close()
        assert group.closed


def test_a_group_on_a_comm_made_with_a_timeout():
    """A communicator made within a bound (2.3) is in NCCL's non-blocking mode; a group on
    it works like any other."""
    requested_gpus()
    with epcomm.Comm.init(epcomm.UniqueId.create(), 1, 0, device=0, timeout_ms=30_000) as comm:
        with epcomm.Group.create(comm, epcomm.GroupConfig(num_experts=8, hidden=2048)) as group:
            group.barrier()
            assert group.async_error() is None


def test_a_comm_whose_second_rank_never_comes_times_out():
    """Rank 0 of a two-rank communicator whose rank 1 never comes (nobody else has the id):
    TIMEOUT after about its 1 s instead of a wait for good."""
    requested_gpus()
    start = time.monotonic()
    with pytest.raises(epcomm.EpcError, match="within 1000 ms") as caught:
        epcomm.Comm.init(epcomm.UniqueId.create(), 2, 0, device=0, timeout_ms=1000)
    seconds = time.monotonic() - start
    assert (caught.value.status, caught.value.function) == (epcomm.Status.TIMEOUT, "epc_comm_init_config")
    assert 0.95 <= seconds < 5.0, f"TIMEOUT after {seconds:.2f} s"


def test_torch_cuda_tensors():
    _, torch = requested_gpus()
    x = torch.randn(16, 2048, device="cuda:0").to(torch.bfloat16)
    with epcomm.as_tensor(x) as t:
        assert (t.data, t.dtype, t.shape, t.device) == (x.data_ptr(), epcomm.Dtype.BF16, (16, 2048), 0)
        assert t.is_contiguous and list(t.descriptor.strides) == [0, 0, 0, 0]
    view = x[:, ::2]
    t = epcomm.as_tensor(view)
    assert t.strides == (2048, 2) and t.data == view.data_ptr()
    with pytest.raises(epcomm.InvalidTensorError, match="not contiguous"):
        epcomm.as_tensor(view, contiguous=True)
    assert epcomm.as_tensor(x.t()).strides == (1, 2048)
    for dtype, expected in [
        (torch.float16, epcomm.Dtype.FP16),
        (torch.float32, epcomm.Dtype.FP32),
        (torch.int32, epcomm.Dtype.INT32),
        (torch.int64, epcomm.Dtype.INT64),
    ]:
        y = torch.zeros(4, 8, device="cuda:0", dtype=dtype)
        assert epcomm.as_tensor(y).dtype == expected
    y = torch.zeros(4, 8, device="cuda:0", dtype=torch.float32)
    via_cai = epcomm.tensor.from_cuda_array_interface(y)
    assert via_cai.data == y.data_ptr() and via_cai.dtype == epcomm.Dtype.FP32
    with pytest.raises(epcomm.InvalidTensorError, match="not a CUDA tensor"):
        epcomm.as_tensor(torch.zeros(4))
    with pytest.raises(epcomm.InvalidTensorError, match="unsupported dtype"):
        epcomm.as_tensor(torch.zeros(4, device="cuda:0", dtype=torch.float64))
    with pytest.raises(epcomm.InvalidTensorError, match="at most 4"):
        epcomm.as_tensor(torch.zeros(1, 1, 1, 1, 2, device="cuda:0"))
    fp8 = torch.zeros(8, 128, device="cuda:0", dtype=torch.float8_e4m3fn)
    try:
        t = epcomm.as_tensor(fp8)
    except epcomm.InvalidTensorError as error:  # torch without fp8 DLPack export
        assert "refused to export" in str(error)
        t = epcomm.as_tensor(fp8.view(torch.uint8), dtype="fp8_e4m3")
    assert t.dtype == epcomm.Dtype.FP8_E4M3 and t.data == fp8.data_ptr()


def readme_examples(repo_root):
    text = (repo_root / "bindings" / "python" / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "bindings/python/README.md has no ```python block"
    return blocks


def readme_example(repo_root):
    return readme_examples(repo_root)[0]


def test_readme_example_one_process_per_gpu(repo_root, tmp_path):
    nranks, _ = requested_gpus()
    script = tmp_path / "epcomm_example.py"
    script.write_text(readme_example(repo_root))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(repo_root / "bindings" / "python")] + [p for p in [env.get("PYTHONPATH")] if p]
    )
    result = subprocess.run(
        [sys.executable, str(script), str(nranks)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in range(nranks):
        assert f"rank {rank}/{nranks}" in result.stdout, result.stdout
        assert re.search(
            rf"rank {rank}: \d+ rows received, combined tokens equal their "
            "inputs: True",
            result.stdout,
        ), result.stdout


def test_readme_examples_are_python(repo_root):
    # Runs everywhere: every example (the one the GPU test runs, the low-latency step, the
    # high-throughput one...) at least compiles.
    blocks = readme_examples(repo_root)
    assert len(blocks) >= 3 and "Quant.FP8" in blocks[1] and "Sizing.EXACT" in blocks[2]
    for number, block in enumerate(blocks, start=1):
        compile(block, f"README.md example {number}", "exec")


def test_gpu_tests_say_why_they_skip(monkeypatch):
    monkeypatch.delenv("EPCOMM_TEST_GPUS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="EPCOMM_TEST_GPUS"):
        requested_gpus()
