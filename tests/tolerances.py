"""The float32 tolerances of the suite's numerical-equality tests, and why each holds on every CPU.

A test that computes one quantity two ways (a sequence against step-by-step acting, a pod's
masked batch against a trainer's gathered columns, two DDP ranks against one trainer) cannot
expect the same bits: the two ways sum in different orders, and which order a kernel uses
depends on the CPU (AVX-512 or AVX2 code paths, oneDNN's and the BLAS's blocking) and on the
thread count. Each tolerance below is derived from float32's unit roundoff (eps = 2**-24 ≈
6e-8 for a rounding, 1.19e-7 between neighbours) and the depth of the computation, then checked
against what `bench/tolerances.py` measures with the default and with the AVX2 code paths forced,
on 1 and on 2 threads (figures in `docs/benchmarks.md`).

`assert_close` compares as `torch.testing.assert_close` does (|a - b| <= atol + rtol |b|,
elementwise). With `HNS_TOLERANCE_LOG=FILE` in the environment, every check also appends one
JSON line with the largest difference it saw and its share of what the tolerance allows, so a
run on any machine shows how close to its limit each test came.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import torch

LOG_ENV = "HNS_TOLERANCE_LOG"
# torch threads of the test processes (1 unless measuring the tolerances with more)
TEST_THREADS = int(os.environ.get("HNS_TEST_THREADS", "1"))


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    why: str
    scaled_atol: float = 0.0  # more absolute slack, as a share of the expected tensor's largest |x|


# A forward pass of the paper's network (lidar conv, embeddings, attention, dense, LSTM over up
# to ~20 steps, LayerNorm, heads) on the same inputs with another batch composition or step
# split. Every product sums at most ~600 terms; the worst reordering error of such a sum is
# ~K * eps * sum|x w| but its typical size is sqrt(K) * eps ≈ 1.5e-6 relative to sum|x w|, and
# LayerNorm keeps activations O(1). Outputs of magnitude <= ~10 therefore agree to ~1e-6; 1e-5
# leaves a factor of ten, and still fails any difference a bug makes (a wrong mask, a state not
# reset, a step out of order change outputs at 1e-3 or more).
FORWARD = Tolerance(
    rtol=1e-5,
    atol=1e-5,
    why="same network and inputs, another summation order: ~sqrt(600) ulp per product, O(1) "
    "activations after LayerNorm",
)

# Statistics of one PPO update (losses, entropy, KL, gradient norm) from the same samples laid
# out differently: means over ~10^3-10^4 terms of forward outputs that agree to FORWARD; their
# relative error stays ~1e-6, and 1e-4 relative (1e-6 absolute for the ones near zero) leaves two
# orders of magnitude.
UPDATE_STATS = Tolerance(
    rtol=1e-4,
    atol=1e-6,
    why="means of forward outputs that agree to ~1e-6 relative",
)

# GAE and normalisation arithmetic on small float32 arrays (a recursion of <= 80 steps, each step
# a few multiply-adds): <= 80 * 3 roundings of O(1) numbers ≈ 2e-5 at worst, 1e-5 + 1e-5 relative
# covers it for the typical error ~sqrt(240) * 6e-8 ≈ 1e-6.
RECURSION = Tolerance(
    rtol=1e-5,
    atol=1e-5,
    why="a <= 80-step float32 recursion of a few roundings per step",
)


# Moments of a few hundred O(1) samples kept as float32 running sums against torch's own mean and
# std: the sums agree to ~1e-6; the std comes from E[x^2] - E[x]^2 (~5 minus ~1), whose
# cancellation costs about ten times that, so 1e-4 absolute leaves a factor of ten.
MOMENTS = Tolerance(
    rtol=0.0,
    atol=1e-4,
    why="float32 running sums; the variance's cancellation E[x^2] - E[x]^2",
)

# De-normalised values before and after PopArt rescales the value head: each weight is rounded
# once more (~6e-8 relative), values reach ~150 and pass through the network's own rounding
# (FORWARD): ~2e-5 at worst; 1e-4 + 1e-5 relative leaves a factor of five.
POPART = Tolerance(
    rtol=1e-5,
    atol=1e-4,
    why="one more rounding of each head weight, values up to ~150",
)


# Parameters after Adam steps taken from the same samples in another layout. Adam divides each
# element's gradient by its own running magnitude, so its step is +-lr for any element whose
# gradient is well above adam_eps, whatever the last bits of the gradient are -- and for an
# element whose gradient is near zero (a sum of terms that cancel), the last bits of that sum,
# which depend on the CPU's summation order, decide a step anywhere in [-lr, lr]. An elementwise
# tolerance of 1e-6 held on AVX2 machines and failed on an AVX-512 Xeon (3.4e-6 in
# lstm.weight_ih). What does hold on every CPU, and what a bug breaks, is the step as a whole:
# per tensor, the two parameter changes differ by a small fraction of the change's norm (a wrong
# mask or a missing column changes the gradients at O(1) and the steps by tens of percent).
@dataclass(frozen=True)
class AdamTolerance:
    norm_rtol: float
    why: str


ADAM_STEP = AdamTolerance(
    norm_rtol=1e-2,
    why="Adam's per-element step is sign-like: near-zero gradients' rounding picks any step in "
    "[-lr, lr]; the step's norm is set by the gradients that are far from zero",
)


# The network as computed (few, large operations: a circulant product for the lidar convolution,
# biases folded before or after, tanh as 2 sigmoid(2x) - 1) against the same math written out
# one step and one entity type at a time, over 10 recurrent steps and their gradients. Each
# result differs by a few units in the last place of the tensor's largest terms (inner products
# of up to 1024 terms: ~sqrt(1024) ulp = 4e-6 at worst; measured 1e-7 .. 2e-6 of the largest
# magnitude); 2e-5 of the tensor's scale plus 2e-5 relative is ten times that.
REFERENCE = Tolerance(
    rtol=2e-5,
    atol=0.0,
    scaled_atol=2e-5,
    why="another grouping of the same products: a few ulp of the tensor's largest terms",
)


def _log(check: str, observed: float, allowed_share: float, tol: object) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    record = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0],
        "check": check,
        "observed": observed,
        "share": allowed_share,
        "tolerance": {k: v for k, v in vars(tol).items() if k != "why"},
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _as_tensor(x) -> torch.Tensor:
    return x.detach().cpu() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))


def assert_close(actual, expected, tol: Tolerance, name: str = "") -> None:
    """|actual - expected| <= tol.atol + tol.rtol * |expected| elementwise (tensors, arrays or
    numbers), logging the largest share of the allowance used (see the module docstring)."""
    a = _as_tensor(actual).double()
    b = _as_tensor(expected).double()
    assert a.shape == b.shape, f"{name}: shapes {tuple(a.shape)} and {tuple(b.shape)} differ"
    diff = (a - b).abs()
    scale = float(b.abs().max()) if b.numel() else 0.0
    allowed = tol.atol + tol.scaled_atol * max(scale, 1e-6) + tol.rtol * b.abs()
    share = float((diff / allowed).max()) if diff.numel() else 0.0
    observed = float(diff.max()) if diff.numel() else 0.0
    _log(name, observed, share, tol)
    assert share <= 1.0, (
        f"{name}: largest difference {observed:.3g} exceeds atol {tol.atol:g} + rtol "
        f"{tol.rtol:g} * |expected| ({share:.2f}x the allowance; {tol.why})"
    )


def step_gap(after_a: torch.Tensor, after_b: torch.Tensor, before: torch.Tensor) -> float:
    """|step_a - step_b| / |step_b| in the 2-norm, the steps taken from `before`."""
    step_a = (after_a - before).double()
    step_b = (after_b - before).double()
    gap = float((step_a - step_b).norm())
    scale = float(step_b.norm())
    return gap / scale if scale > 0 else (0.0 if gap == 0 else float("inf"))


def assert_same_adam_step(
    after_a: torch.Tensor,
    after_b: torch.Tensor,
    before: torch.Tensor,
    tol: AdamTolerance = ADAM_STEP,
    name: str = "",
) -> None:
    """Two copies of one parameter, `before` their shared start, took the same Adam steps from
    samples in different layouts (see ADAM_STEP)."""
    gap = step_gap(after_a, after_b, before)
    _log(name, gap, gap / tol.norm_rtol, tol)
    assert gap <= tol.norm_rtol, (
        f"{name}: the two steps differ by {gap:.3g} of the step's norm (allowed "
        f"{tol.norm_rtol:g}; {tol.why})"
    )


def assert_same_update(
    after_a: dict[str, torch.Tensor],
    after_b: dict[str, torch.Tensor],
    before: dict[str, torch.Tensor],
    parameters: set[str],
) -> None:
    """Two copies of one model's state dict, both at `before`, after the same update from samples
    in different layouts: the `parameters` by ADAM_STEP, float buffers (normalisers' moments) by
    UPDATE_STATS, counters exactly."""
    assert after_a.keys() == after_b.keys() == before.keys()
    for name, a in after_a.items():
        b = after_b[name]
        if name in parameters:
            assert_same_adam_step(a, b, before[name], name=name)
        elif a.dtype.is_floating_point:
            assert_close(a, b, UPDATE_STATS, name)
        else:
            assert torch.equal(a, b), name
