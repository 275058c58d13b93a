# SPDX-License-Identifier: Apache-2.0
"""Two micro-batches in flight on one low-latency group, as vLLM's dual-batch overlap runs a
decode loop: micro-batches A and B each have a handle and a torch stream; every layer sends
both dispatches, then each micro-batch completes its dispatch, runs its experts and sends its
combine, then each completes its combine and sends its next layer's dispatch while the other's
combine is still pending. Sends of one direction are ordered across the two streams by events
(the order epc_dispatch's header asks for). Every dispatch and combine is checked bit for bit
against the host model (ll_model.py). Runs with EPCOMM_TEST_GPUS=N, N >= 1; skipped otherwise.
"""

import epcomm
from gpu_support import requested_gpus, run_ranks
from ll_model import LlCase
from test_gpu_ll import Rank, group_config

LAYERS = 6


class Sends:
    """Orders each direction's sends across streams: a send on another stream than the last
    send of its direction waits for that one's event first."""

    def __init__(self, torch):
        self.torch = torch
        self.last = {}  # direction -> (stream, event)

    def send(self, direction, stream, call):
        previous = self.last.get(direction)
        if previous is not None and previous[0] is not stream:
            stream.wait_event(previous[1])
        with self.torch.cuda.stream(stream):
            call()
            event = self.torch.cuda.Event()
            event.record(stream)
        self.last[direction] = (stream, event)


def test_dual_batch_overlap_decode_loop_matches_the_host_model():
    nranks, torch = requested_gpus()
    case = LlCase(nranks=nranks)
    config = group_config(case)
    assert epcomm.plan_query(config, nranks).max_pending_steps == 2  # the default serves two
    uid = epcomm.UniqueId.create()

    def rank_main(rank):
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        batches = [Rank(torch, case, rank, device) for _ in range(2)]
        streams = [torch.cuda.Stream(device) for _ in range(2)]
        sends = Sends(torch)
        with epcomm.Comm.init(uid, nranks, rank, device=rank) as comm, epcomm.Group.create(comm, config) as group:
            handles = [epcomm.Handle.create(group) for _ in range(2)]
            outs = [None, None]
            try:

                def send_dispatch(b, layer):
                    number = 2 * layer + b  # the host model's step of micro-batch b in this layer
                    r, handle = batches[b], handles[b]
                    with torch.cuda.stream(streams[b]):
                        idx, weights, x, outs[b] = r.inputs(number, torch.bfloat16)
                        handle.update(idx)
                    sends.send(
                        "dispatch",
                        streams[b],
                        lambda: handle.dispatch(
                            x, out_x=r.out_x, topk_weights=weights, out_expert_counts=r.out_counts, send_only=True
                        ),
                    )
                    # The inputs must live until the send has run.
                    streams[b].synchronize()

                for b in range(2):
                    send_dispatch(b, 0)
                assert [h.query().pending for h in handles] == [epcomm.Pending.DISPATCH] * 2
                for layer in range(LAYERS):
                    for b in range(2):  # each micro-batch's experts, then its combine send
                        r, handle = batches[b], handles[b]
                        with torch.cuda.stream(streams[b]):
                            handle.complete()
                            r.run_experts()
                        sends.send(
                            "combine",
                            streams[b],
                            lambda r=r, handle=handle, b=b: handle.combine(r.expert_out, out=outs[b], send_only=True),
                        )
                    assert [h.query().pending for h in handles] == [epcomm.Pending.COMBINE] * 2
                    for b in range(2):  # each combine, then the next layer's dispatch
                        r, handle = batches[b], handles[b]
                        with torch.cuda.stream(streams[b]):
                            handle.complete()
                        r.check_dispatch_device_counts(2 * layer + b)
                        r.check_combine(2 * layer + b, outs[b])
                        if layer + 1 < LAYERS:
                            send_dispatch(b, layer + 1)
            finally:
                torch.cuda.synchronize(device)
                for handle in handles:
                    handle.close()

    run_ranks(nranks, rank_main)
