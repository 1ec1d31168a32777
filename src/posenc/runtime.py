"""The one runtime set-up of every stage that runs a model: allocator, threads, determinism, device,
and the check that the numerics mode is the one in effect (posenc.numerics sets it before torch).

Thread count and deterministic algorithms fix the bits of a result (both are part of the
experiment: 1 and 2 threads give different sums). cuBLAS is deterministic only with a fixed
workspace, set through CUBLAS_WORKSPACE_CONFIG before its first call; without it, deterministic
algorithms make every GPU matrix product fail. Under torchrun each process takes the GPU of its
LOCAL_RANK.
"""

from __future__ import annotations

import os

import torch

from posenc import allocator, numerics


def setup(threads: int, mode: str) -> torch.device:
    """Set the process up to run models reproducibly under numerics `mode`; the device to run them on."""
    numerics.check(mode)
    allocator.tune()
    torch.set_num_threads(threads)
    if torch.cuda.is_available():
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.use_deterministic_algorithms(True)
    # With deterministic algorithms torch also fills every new tensor with NaN, in case an operator
    # reads memory it has not written; posenc reads none (the decoding cache reads only the
    # positions it has filled), and the extra pass cost 5% of beam search (README, Performance).
    # tests/test_model.py checks that gradients and hypotheses are the same either way.
    torch.utils.deterministic.fill_uninitialized_memory = False
    return device
