# SPDX-License-Identifier: Apache-2.0
"""What the GPU tests share: whether to run (EPCOMM_TEST_GPUS and torch), and one thread per
rank with a time limit."""

import os
import threading

import pytest

TIMEOUT_S = 240


def requested_gpus():
    """(N, torch) when GPU tests should run, else pytest.skip with the reason."""
    value = os.environ.get("EPCOMM_TEST_GPUS", "").strip()
    if not value:
        pytest.skip("GPU test: set EPCOMM_TEST_GPUS=N (N GPUs) to run it")
    try:
        import torch
    except ImportError:
        pytest.skip("GPU test: torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("GPU test: torch sees no CUDA device")
    wanted = int(value)
    if wanted < 1 or torch.cuda.device_count() < wanted:
        pytest.skip(f"GPU test: EPCOMM_TEST_GPUS={wanted} but torch sees {torch.cuda.device_count()} CUDA devices")
    return wanted, torch


def two_or_more_gpus(what):
    """requested_gpus(), skipping the `what` test unless it asks for at least 2."""
    nranks, torch = requested_gpus()
    if nranks < 2:
        pytest.skip(f"GPU {what} test: needs EPCOMM_TEST_GPUS >= 2, got {nranks}")
    return nranks, torch


def bits(torch, tensor):
    """bf16 tensor -> nested lists of its bit patterns (as non-negative ints)."""
    return (tensor.detach().cpu().view(torch.int16).to(torch.int32) & 0xFFFF).tolist()


def run_ranks(nranks, rank_main):
    """Run rank_main(rank) on one daemon thread per rank; raise the first failure."""
    errors = []

    def guarded(rank):
        try:
            rank_main(rank)
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append((rank, error))

    threads = [threading.Thread(target=guarded, args=(r,), daemon=True) for r in range(nranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    assert not stuck, f"ranks {stuck} did not finish within {TIMEOUT_S} s (errors: {errors})"
    if errors:
        rank, error = errors[0]
        raise AssertionError(f"rank {rank} failed: {error!r}") from error
