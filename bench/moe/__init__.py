# SPDX-License-Identifier: Apache-2.0
"""The parts of bench/moe_layer.py (a real MoE layer on epcomm, checked and timed against
torch.distributed.all_to_all_single):

    cli       the command line and where libepcomm is found (no torch needed)
    layer     what every version shares: weights, router, expert MLP, the one-GPU reference
    ll_path   ours at decode sizes: epcomm's low-latency dispatch and combine
    ht_path   ours at prefill sizes: epcomm's high-throughput dispatch and combine
    baseline  the same layer on torch.distributed.all_to_all_single
    run       one rank: build the layers, check each point against one GPU, time it
    report    the table printed from the JSON record (no torch needed)

Only `run` and the layer modules need torch, and they take it as an argument, so importing
this package loads nothing.
"""
