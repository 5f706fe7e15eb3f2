"""The training-side package: importable without the service, a linear sketch, the hook's
contract with DDP (checked on real DDP in tests/service/integrity)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


def test_importable_without_web_store_or_torch() -> None:
    code = (
        "import sys, hpcscope.integrity\n"
        "heavy = {'fastapi', 'starlette', 'duckdb', 'pyarrow', 'polars', 'torch', 'uvicorn'}\n"
        "loaded = sorted(heavy & set(sys.modules))\n"
        "assert not loaded, loaded\n"
        "assert hpcscope.integrity.register and hpcscope.integrity.maybe_register\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src")},
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_job_seed_is_shared_and_differs_between_jobs() -> None:
    from hpcscope.integrity import job_seed

    assert job_seed("4242") == job_seed("4242")
    assert job_seed("4242") != job_seed("4243")


@pytest.mark.torch
@settings(max_examples=25, deadline=None)
@given(
    numel=st.integers(1, 700),
    k=st.integers(1, 64),
    seed=st.integers(0, 2**31),
    scale=st.floats(-3, 3, allow_nan=False),
)
def test_sketch_is_linear(numel: int, k: int, seed: int, scale: float) -> None:
    import torch

    from hpcscope.integrity import CountSketch

    sketch = CountSketch(seed, k)
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(numel, generator=generator, dtype=torch.float64)
    b = torch.randn(numel, generator=generator, dtype=torch.float64)
    assert sketch(0, a).shape == (k,)
    assert torch.allclose(sketch(0, a + scale * b), sketch(0, a) + scale * sketch(0, b))
    # the same bucket on another rank (another object, same seed) sketches the same
    assert torch.equal(CountSketch(seed, k)(0, a), sketch(0, a))


@pytest.mark.torch
@settings(max_examples=25, deadline=None)
@given(
    numel=st.integers(1, 900),
    k=st.integers(1, 64),
    world=st.integers(1, 9),
    step=st.integers(0, 50),
)
def test_witnessed_slices_sum_to_the_bucket_sketch(
    numel: int, k: int, world: int, step: int
) -> None:
    import torch

    from hpcscope.integrity import CountSketch
    from hpcscope.model.integrity import slice_bounds, witnessed_slices

    sketch = CountSketch(3, k)
    flat = torch.randn(numel, generator=torch.Generator().manual_seed(numel), dtype=torch.float64)
    of = witnessed_slices(0, step, world, numel, k)[0]
    parts = [sketch.part(0, flat, *slice_bounds(numel, k, of, i)) for i in range(of)]
    assert torch.allclose(torch.stack(parts).sum(0), sketch(0, flat))
    if k > 1:  # a part that does not start on a sketch row would misalign the positions
        with pytest.raises(ValueError, match="multiple of"):
            sketch.part(0, flat, 1, numel)


@pytest.mark.torch
@settings(max_examples=40, deadline=None)
@given(
    numel=st.integers(1, 3000),
    k=st.integers(1, 64),
    chunk=st.integers(1, 700),
    divide_by=st.integers(1, 9),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_the_chunked_pass_is_the_count_sketch_and_divides_as_allreduce_hook(
    numel: int, k: int, chunk: int, divide_by: int, dtype: str
) -> None:
    import torch

    from hpcscope.integrity import CountSketch

    generator = torch.Generator().manual_seed(numel * 7 + k)
    flat = torch.randn(numel, generator=generator, dtype=getattr(torch, dtype)) * 3
    sketcher = CountSketch(5, k, chunk_elements=chunk)  # many chunks, and a tail
    signs = sketcher.signs(0, flat)
    # the definition, position by position: sketch[m] = sum over j = m (mod k) of s_j x_j
    expected = torch.zeros(k, dtype=torch.float64).index_add_(
        0, torch.arange(numel) % k, (flat * signs).double()
    )
    sent = flat.clone()
    sketch, squares = sketcher.measure(0, sent, divide_by)
    assert torch.allclose(sketch.double(), expected, rtol=1e-4, atol=1e-4)
    assert torch.allclose(squares.double(), flat.double().square().sum(), rtol=1e-4)
    # what allreduce_hook sends, to the bit (its tensor.div_(world size))
    assert torch.equal(sent, flat.clone().div_(divide_by))
    start = numel // k // 2 * k
    part = torch.zeros(k, dtype=torch.float64).index_add_(
        0, torch.arange(start, numel) % k, (flat * signs)[start:].double()
    )
    assert torch.allclose(sketcher.part(0, flat, start, numel).double(), part, atol=1e-4)


@pytest.mark.torch
def test_sketch_preserves_cosines_approximately() -> None:
    import torch

    from hpcscope.integrity import CountSketch

    generator = torch.Generator().manual_seed(3)
    shared = torch.randn(50_000, generator=generator, dtype=torch.float64)
    errors = []
    for seed in range(20):
        a = shared + 0.8 * torch.randn(50_000, generator=generator, dtype=torch.float64)
        b = shared + 0.8 * torch.randn(50_000, generator=generator, dtype=torch.float64)
        sketch = CountSketch(seed, 128)
        true = torch.nn.functional.cosine_similarity(a, b, dim=0)
        estimate = torch.nn.functional.cosine_similarity(sketch(0, a), sketch(0, b), dim=0)
        errors.append(abs(float(true - estimate)))
    # true cosine ~0.61; k = 128: standard error ~ (1 - cos^2) / sqrt(k) ~ 0.056
    assert sum(errors) / len(errors) < 0.07
    assert max(errors) < 0.2


@pytest.mark.torch
def test_a_bfloat16_bucket_takes_the_pytorch_pass_and_agrees() -> None:
    import torch

    from hpcscope.integrity import CountSketch

    flat = torch.randn(5_000, generator=torch.Generator().manual_seed(9))
    sketcher = CountSketch(11, 32, chunk_elements=700)
    host_sent, torch_sent = flat.clone(), flat.to(torch.bfloat16)
    host_sketch, host_squares = sketcher.host_measure(0, host_sent, 4)
    sketch, squares = sketcher.measure(0, torch_sent, 4)  # NumPy has no bfloat16
    assert sketch.dtype == torch.bfloat16
    assert torch.allclose(sketch.double(), torch.from_numpy(host_sketch).double(), atol=0.5)
    assert abs(float(squares) - host_squares) < 0.02 * host_squares
    assert torch.equal(torch_sent, flat.to(torch.bfloat16).div_(4))
    assert torch.equal(host_sent, flat.clone().div_(4))


class _Bucket:
    """The part of ``torch.distributed.GradBucket`` the hook reads (a fake)."""

    def __init__(self, index: int, buffer: object, last: bool) -> None:
        self._index, self._buffer, self._last = index, buffer, last

    def buffer(self) -> object:
        return self._buffer

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._last


@pytest.mark.torch
def test_a_cpu_bucket_with_nan_and_inf_is_counted(tmp_path: Path) -> None:
    import math

    import torch

    from hpcscope.integrity import IntegrityHook

    hook = IntegrityHook(tmp_path, job_id="7", rank=0, world_size=4, seed=1, node="n", gpu=0)
    flat = torch.ones(1_000)
    flat[3], flat[500] = float("nan"), float("inf")
    observation = hook._observe(_Bucket(0, flat, True), flat, 4)
    assert observation.nonfinite == 2
    assert math.isnan(observation.norm)
    finite = torch.full((1_000,), 2.0)
    observation = hook._observe(_Bucket(0, finite, True), finite, 4)
    assert (observation.nonfinite, observation.norm) == (0, pytest.approx(2.0 * math.sqrt(1_000)))
    assert observation.sketch.shape == (hook.sketcher.k,)
    hook.close()
