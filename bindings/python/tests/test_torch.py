# SPDX-License-Identifier: Apache-2.0
"""epcomm.torch on a real GPU, one rank: a Buffer from a one-rank NCCL process group (the
group's communicator adopted, and the unique-id fallback), low-latency and high-throughput
round trips checked exactly, weights given at combine in both modes, CUDA graph capture
and replay, torch.compile of a function that dispatches and combines, the high-throughput autograd layer against the same layer
computed without epcomm, and the refusals of bad input naming the argument.

Skipped, with the reason, where torch is not installed (CI) or EPCOMM_TEST_GPUS is unset.
"""

import socket

import pytest

torch = pytest.importorskip("torch", reason="epcomm.torch tests: torch is not installed (they run on the GPU machines)")

import epcomm  # noqa: E402
from gpu_support import bits, requested_gpus  # noqa: E402
from ll_model import LlCase, bf16_bits, first_difference  # noqa: E402

HIDDEN, EXPERTS, TOKENS, TOPK = 512, 8, 32, 2


@pytest.fixture(scope="module")
def dist():
    requested_gpus()
    import torch.distributed as dist

    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield dist
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ept():
    import epcomm.torch as ept

    return ept


@pytest.fixture(scope="module")
def ll(dist, ept):
    with ept.Buffer(num_experts=EXPERTS, hidden=HIDDEN, max_tokens_per_rank=TOKENS, max_topk=TOPK) as buffer:
        yield buffer


@pytest.fixture(scope="module")
def ht(dist, ept):
    with ept.Buffer(
        num_experts=EXPERTS, hidden=HIDDEN, max_tokens_per_rank=TOKENS, max_topk=TOPK, mode="high_throughput"
    ) as buffer:
        yield buffer


def routing(seed, tokens=TOKENS, masked=False):
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK] for _ in range(tokens)])
    if masked:
        idx[::5, 1] = -1  # some entries masked
        idx[3] = -1  # a token sent nowhere
    x = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16)
    w = torch.full((tokens, TOPK), 0.5)
    return x.cuda(), idx.cuda(), w.cuda()


def test_the_buffer_adopts_the_groups_nccl_communicator(ll):
    assert ll.comm_source.startswith("adopted"), ll.comm_source
    assert not ll.comm.owned and ll.info.nranks == 1 and ll.info.cuda_device == 0


def test_without_adoption_a_unique_id_is_broadcast(dist, ept):
    with ept.Buffer(num_experts=EXPERTS, hidden=HIDDEN, max_tokens_per_rank=TOKENS, adopt=False) as buffer:
        assert "unique id" in buffer.comm_source and buffer.comm.owned
        x, idx, w = routing(1)
        recv, counts = buffer.ll_dispatch(x, idx, w)
        out = buffer.ll_combine(recv, idx)
        assert torch.equal(out, x)


def test_a_non_nccl_group_is_refused(dist, ept):
    gloo = dist.new_group(backend="gloo")
    with pytest.raises(ValueError, match="backend is 'gloo', not NCCL"):
        ept.Buffer(gloo, num_experts=EXPERTS, hidden=HIDDEN)


def expected_rows(x, idx):
    """Per expert, the rows of the tokens routed to it, in token order (one rank)."""
    return [x[(idx == e).any(dim=1)] for e in range(EXPERTS)]


def test_ll_round_trip_allocates_its_outputs(ll):
    for seed in (2, 3):  # back-to-back steps
        x, idx, w = routing(seed, masked=seed == 3)
        recv, counts = ll.ll_dispatch(x, idx, w)
        assert recv.shape == (EXPERTS, TOKENS, HIDDEN) and counts.dtype == torch.int32
        want = expected_rows(x, idx)
        assert counts.tolist() == [len(r) for r in want]
        for e, rows in enumerate(want):
            assert torch.equal(recv[e, : len(rows)], rows), f"expert {e}"
        out = ll.ll_combine(recv * 2, idx)
        sent = (idx >= 0).sum(dim=1, keepdim=True)
        assert torch.equal(out, (x.float() * 2 * 0.5 * sent).to(torch.bfloat16))


def test_ll_step_bound_is_passed_and_checked(ll):
    x, idx, w = routing(10, tokens=8)
    recv, counts = ll.ll_dispatch(x, idx, w, max_step_tokens=8)
    want = expected_rows(x, idx)
    assert counts.tolist() == [len(r) for r in want]
    for e, rows in enumerate(want):
        assert torch.equal(recv[e, : len(rows)], rows), f"expert {e}"
    with pytest.raises(epcomm.EpcError, match="max_step_tokens is 7"):
        ll.ll_dispatch(x, idx, w, max_step_tokens=7)


def test_ll_preallocated_outputs_are_captured_in_a_cuda_graph(ll):
    x, idx, w = routing(4)
    out_x = torch.empty(EXPERTS, TOKENS, HIDDEN, dtype=torch.bfloat16, device="cuda")
    counts = torch.empty(EXPERTS, dtype=torch.int32, device="cuda")
    expert_out = torch.empty_like(out_x)
    out = torch.empty(TOKENS, HIDDEN, dtype=torch.float32, device="cuda")

    def step():
        got = ll.ll_dispatch(x, idx, w, out_x=out_x, out_expert_counts=counts)
        assert got[0] is out_x and got[1] is counts
        torch.mul(out_x, 2, out=expert_out)
        assert ll.ll_combine(expert_out, idx, out=out) is out

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up: the handle is created outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in (5, 6, 7):
        new_x, new_idx, _ = routing(seed)
        x.copy_(new_x)
        idx.copy_(new_idx)
        out.fill_(-1)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, new_x.float() * 2), f"replay with seed {seed}"


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_sees_opaque_ops(ll, backend):
    def layer(x, idx, w):
        recv, counts = ll.ll_dispatch(x, idx, w)
        return ll.ll_combine(recv * 2, idx)

    torch._dynamo.reset()
    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    for seed in (8, 9):
        x, idx, w = routing(seed)
        assert torch.equal(compiled(x, idx, w), (x.float() * 2).to(torch.bfloat16))
    explained = torch._dynamo.explain(layer)(x, idx, w)
    assert explained.graph_break_count == 0
    ops = " ".join(str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function")
    assert "epcomm.ll_dispatch" in ops and "epcomm.combine" in ops, ops


def test_ht_round_trip(ht):
    rows = ht.rows()
    assert rows == TOKENS  # capacity sizing: nranks * max_tokens_per_rank
    for seed in (10, 11):
        x, idx, w = routing(seed, masked=True)
        w = torch.rand(TOKENS, TOPK, device="cuda")
        recv_x, recv_idx, recv_w, counts, num = ht.ht_dispatch(x, idx, w)
        sent = (idx >= 0).any(dim=1)
        n = int(sent.sum())
        assert num.tolist() == [n]
        assert torch.equal(recv_x[:n], x[sent])
        assert torch.equal(recv_idx[:n], idx[sent].to(torch.int32))
        assert torch.equal(recv_w[:n], torch.where(idx[sent] >= 0, w[sent], torch.zeros_like(w[sent])))
        assert counts.tolist() == [int((idx == e).sum()) for e in range(EXPERTS)]
        out = ht.ht_combine(recv_x, idx)
        assert torch.equal(out, torch.where(sent[:, None], x, torch.zeros_like(x)))


def test_ht_packed_round_trip(ht):
    """Expert-packed dispatch and weighted combine on slot 1, exactly: each expert's zone
    holds its entries' rows in (token, slot) order, zones aligned to 4 rows; combine sums
    w * row per token (power-of-two weights: every product and sum is exact) into bf16."""
    align, slot = 4, 1
    for seed in (20, 21):
        x, idx, _ = routing(seed, masked=True)
        g = torch.Generator(device="cuda").manual_seed(seed)
        w = 2.0 ** -torch.randint(0, 3, (TOKENS, TOPK), device="cuda", generator=g).float()
        recv_x, counts, offsets = ht.ht_dispatch_packed(x, idx, w, alignment=align, slot=slot)
        want_counts = [int((idx == e).sum()) for e in range(EXPERTS)]
        assert counts.tolist() == want_counts
        want_offsets = [0]
        for c in want_counts:
            want_offsets.append(want_offsets[-1] + -(-c // align) * align)
        assert offsets.tolist() == want_offsets
        for e in range(EXPERTS):
            token, _ = (idx == e).nonzero(as_tuple=True)  # row-major: (token, slot) order
            zone = recv_x[want_offsets[e] : want_offsets[e] + want_counts[e]]
            assert torch.equal(zone, x[token]), f"expert {e}"
        out = ht.ht_combine(recv_x, idx, slot=slot)
        valid = (idx >= 0).float()
        partial = torch.zeros(TOKENS, HIDDEN, device="cuda")
        for k in range(TOPK):
            partial = partial + (w[:, k] * valid[:, k])[:, None] * x.float()
        assert torch.equal(out, partial.to(torch.bfloat16))
    with pytest.raises(ValueError, match="slot 1's handle has EXPERT_PACKED"):
        ht.ht_dispatch(x, idx, w, slot=slot)


def test_ht_packed_combine_with_weights_at_home(dist, ept):
    """Weights given at combine (Weighting.HOME) on a Buffer with a per-entry combine window:
    out is the float32 sum over a token's entries, in top-k order, of the weight given here
    times the entry's row, rounded once; dispatch's weights play no part. Power-of-two
    weights and rows 1 + e/8 keep every product and sum exact."""
    with ept.Buffer(
        num_experts=EXPERTS,
        hidden=HIDDEN,
        max_tokens_per_rank=TOKENS,
        max_topk=TOPK,
        mode="high_throughput",
        flags=epcomm.GroupFlags.COMBINE_PER_ENTRY,
    ) as buffer:
        x, idx, w = routing(22, masked=True)
        g = torch.Generator(device="cuda").manual_seed(22)
        home = 2.0 ** -torch.randint(0, 3, (TOKENS, TOPK), device="cuda", generator=g).float()
        recv_x, counts, offsets = buffer.ht_dispatch_packed(x, idx, w)
        rows = torch.empty_like(recv_x)
        for e in range(EXPERTS):  # expert e's rows: 1 + e / 8 everywhere
            rows[offsets[e] : offsets[e] + counts[e]] = 1.0 + e / 8.0
        want = torch.zeros(TOKENS, HIDDEN, device="cuda")
        for k in range(TOPK):
            valid = idx[:, k] >= 0
            value = torch.where(valid, (1.0 + idx[:, k].clamp(min=0).float() / 8.0) * home[:, k], 0.0)
            want = want + value[:, None]
        out = buffer.ht_combine(rows, idx, home_topk_weights=home)
        assert torch.equal(out, want.to(torch.bfloat16))
        out32 = buffer.ht_combine(rows, idx, home_topk_weights=home, out=torch.empty(TOKENS, HIDDEN, device="cuda"))
        assert torch.equal(out32, want)
        with pytest.raises(ValueError, match="home_topk_weights"):
            buffer.ht_combine(rows, idx, home_topk_weights=home, topk_weights=w)


def test_ll_combine_with_weights_at_home(dist, ept):
    """ll_combine(home_topk_weights=) on a Buffer created with GroupFlags.COMBINE_PER_ENTRY
    matches the host model bit for bit (ll_model.combine_home_sums, as the Handle-level test
    in test_gpu_ll.py): eager into an allocated bf16 out, into a float32 out, and compiled
    (the epcomm.combine_home op); a bad home_topk_weights is refused naming it. Weights at
    combine only: a dispatch without topk_weights (eager and compiled) gives the same sums,
    and its default, sender-weighted combine is refused naming the weighting."""
    case = LlCase(nranks=1)
    experts = case.experts_per_rank
    scales = torch.tensor([case.expert_scale(e) for e in range(experts)], device="cuda").view(experts, 1, 1)

    def inputs(step):
        values = [[case.x_value(step, 0, t, c) for c in range(case.hidden)] for t in range(case.tokens(step, 0))]
        x = torch.tensor(values).to(torch.bfloat16).cuda()
        idx = torch.tensor(case.topk_idx(step, 0), device="cuda")
        w = torch.tensor(case.topk_weights(step, 0), device="cuda")
        return x, idx, w, torch.tensor(case.home_weights(step, 0), device="cuda")

    def run_experts(recv, counts):
        """Local expert l scales its counted rows by expert_scale(l); zeros past them."""
        counted = torch.arange(recv.shape[1], device="cuda").view(1, -1, 1) < counts.view(-1, 1, 1)
        scaled = (recv.float() * scales).to(torch.bfloat16)
        return torch.where(counted, scaled, torch.zeros_like(scaled))

    def check(step, out):
        sums = case.combine_home_sums(step, 0)
        if out.dtype == torch.float32:
            assert out.cpu().tolist() == sums, f"step {step}: float32 combined tokens at home"
        else:
            want = [[bf16_bits(v) for v in row] for row in sums]
            problem = first_difference(f"step {step}: combined tokens at home", bits(torch, out), want)
            assert not problem, problem

    def layer(x, idx, w, home, out=None):
        recv, counts = buffer.ll_dispatch(x, idx, w)
        return buffer.ll_combine(run_experts(recv, counts), idx, out=out, home_topk_weights=home)

    with ept.Buffer(
        num_experts=case.experts,
        hidden=case.hidden,
        max_tokens_per_rank=case.max_tokens,
        max_topk=4,
        flags=epcomm.GroupFlags.COMBINE_PER_ENTRY,
    ) as buffer:
        x, idx, w, home = inputs(0)
        recv, _ = buffer.ll_dispatch(x, idx, w)
        with pytest.raises(epcomm.InvalidTensorError, match="home_topk_weights has dtype torch.float64") as refused:
            buffer.ll_combine(recv, idx, home_topk_weights=home.double())
        assert refused.value.function == "ll_combine", refused.value
        with pytest.raises(epcomm.EpcError, match="home_topk_weights") as caught:
            buffer.ll_combine(recv, idx, home_topk_weights=home[:-1].contiguous())
        assert caught.value.status == epcomm.Status.INVALID_ARGUMENT, caught.value
        check(0, layer(x, idx, w, home))
        x, idx, w, home = inputs(1)
        out = torch.empty(len(x), case.hidden, device="cuda")
        assert layer(x, idx, w, home, out) is out
        check(1, out)
        recv, counts = buffer.ll_dispatch(x, idx, None)
        with pytest.raises(epcomm.EpcError, match="weighting") as caught:
            buffer.ll_combine(run_experts(recv, counts), idx)
        assert caught.value.status == epcomm.Status.INVALID_ARGUMENT, caught.value
        check(1, buffer.ll_combine(run_experts(recv, counts), idx, out=out, home_topk_weights=home))
        torch._dynamo.reset()
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
        x, idx, w, home = inputs(2)
        check(2, compiled(x, idx, w, home))
        check(2, compiled(x, idx, None, home))
        explained = torch._dynamo.explain(layer)(x, idx, w, home)
        ops = " ".join(str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function")
        assert explained.graph_break_count == 0 and "epcomm.combine_home" in ops, ops


def test_ll_combine_with_weights_at_home_needs_the_flag(ll):
    """A Buffer created without GroupFlags.COMBINE_PER_ENTRY: the library's refusal reaches the
    caller as EpcError, and the Buffer still works after it."""
    x, idx, w = routing(16)
    recv, _ = ll.ll_dispatch(x, idx, w)
    with pytest.raises(epcomm.EpcError, match="EPC_GROUP_COMBINE_PER_ENTRY") as caught:
        ll.ll_combine(recv, idx, home_topk_weights=w)
    assert caught.value.status == epcomm.Status.INVALID_ARGUMENT, caught.value
    assert torch.equal(ll.ll_combine(recv, idx), x)


def moe_forward(x, idx, w, weights, valid=None):
    """sum_k w[t, k] * (x[t] @ weights[idx[t, k]]) in float32, rounded to bf16; rows outside
    `valid` are zero (their inputs are unspecified)."""
    if valid is not None:
        x = torch.where(valid[:, None], x, torch.zeros_like(x))
        w = torch.where(valid[:, None], w, torch.zeros_like(w))
        idx = torch.where(valid[:, None], idx, torch.full_like(idx, -1))
    y = torch.zeros(x.shape[0], HIDDEN, device=x.device)
    for e in range(EXPERTS):
        gate = (w * (idx == e)).sum(dim=1, keepdim=True)
        y = y + gate * (x.float() @ weights[e])
    return y.to(torch.bfloat16)


def test_ht_autograd_matches_the_layer_on_one_gpu(ht):
    x, idx, _ = routing(12, masked=True)
    g = torch.Generator(device="cuda").manual_seed(13)
    w = torch.rand(TOKENS, TOPK, device="cuda", generator=g)
    weights = torch.randn(EXPERTS, HIDDEN, HIDDEN, device="cuda", generator=g) / HIDDEN**0.5
    grad_out = torch.randn(TOKENS, HIDDEN, device="cuda", generator=g)

    def run(through_epcomm):
        xs, ws, mats = (t.detach().clone().requires_grad_() for t in (x, w, weights))
        if through_epcomm:
            recv_x, recv_idx, recv_w, _counts, num = ht.dispatch_autograd(xs, idx, ws)
            valid = torch.arange(recv_x.shape[0], device="cuda") < num
            y = moe_forward(recv_x, recv_idx.long(), recv_w, mats, valid)
            out = ht.combine_autograd(y, idx)
        else:
            out = moe_forward(xs, idx, ws, mats)
        (out.float() * grad_out).sum().backward()
        return out, xs.grad, ws.grad, mats.grad

    got, want = run(True), run(False)
    for name, a, b in zip(("out", "grad x", "grad topk_weights", "grad expert weights"), got, want):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2, msg=lambda m, n=name: f"{n}: {m}")
    assert got[0].abs().sum() > 0 and got[1].abs().sum() > 0


def test_bad_input_is_refused_naming_the_argument(ll, ept):
    x, idx, w = routing(14)
    cases = [
        (dict(x=x.cpu()), "x is on the CPU"),
        (dict(topk_weights=w.half()), "topk_weights has dtype torch.float16; expected float32"),
        (dict(x=torch.empty(HIDDEN, TOKENS, dtype=torch.bfloat16, device="cuda").t()), "x is not contiguous"),
        (dict(topk_idx=idx.float()), "topk_idx has dtype torch.float32; expected int32 or int64"),
        (dict(out_expert_counts=torch.empty(EXPERTS, dtype=torch.int64, device="cuda")), "out_expert_counts has dtype"),
    ]
    for change, message in cases:
        kwargs = {**dict(x=x, topk_idx=idx, topk_weights=w), **change}
        with pytest.raises(epcomm.InvalidTensorError, match=message):
            ll.ll_dispatch(kwargs.pop("x"), kwargs.pop("topk_idx"), kwargs.pop("topk_weights"), **kwargs)
    # Another GPU (one GPU here: the check itself, as the Buffer on cuda:1 would run it).
    with pytest.raises(epcomm.InvalidTensorError, match="x is on cuda:0; the buffer's group is on cuda:1"):
        ept.check(x, "x", 1, frozenset({torch.bfloat16}), "ll_dispatch")
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        ll.ll_dispatch([1], idx, w)
    # The buffer still works after the refusals.
    recv, _ = ll.ll_dispatch(x, idx, w)
    assert torch.equal(ll.ll_combine(recv, idx), x)


def test_describe_gives_a_reusable_descriptor_for_the_core_api(ll, ept):
    x, idx, w = routing(15)
    out = torch.empty_like(x)
    recv = torch.empty(EXPERTS, TOKENS, HIDDEN, dtype=torch.bfloat16, device="cuda")
    static = {name: ept.describe(t) for name, t in (("x", x), ("w", w), ("recv", recv), ("out", out))}
    assert static["x"].data == x.data_ptr() and static["x"].shape == (TOKENS, HIDDEN)
    with epcomm.Handle.create(ll.group) as handle:
        for _ in range(10):  # the same descriptors at every step
            handle.update(idx)
            handle.dispatch(
                static["x"], out_x=static["recv"], topk_weights=static["w"], stream=torch.cuda.current_stream()
            )
            handle.combine(static["recv"], out=static["out"], stream=torch.cuda.current_stream())
        torch.cuda.synchronize()
    assert torch.equal(out, x)
    assert not static["x"].released
