"""The direct Conv kernel's tile and threading: the tile fits the registers numba
compiles for (and the AVX2 tile runs right on a host with AVX-512), any thread count
gives the same bits, callers may run at once, a forked child convolves, a worker's
error reaches its caller, and an interrupted caller waits for its workers."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from polyhal.adapters.cpu import threads as cpu_threads
from polyhal.adapters.cpu.kernels import direct_conv, simd
from polyhal.adapters.cpu.kernels.crew import Crew


def _problem(seed: int = 0, dtype: type = np.float32
             ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(5, 12, 10, 16)).astype(dtype)  # [N, H, W, C]
    filters = direct_conv.pack_filters(rng.normal(size=(20, 16, 3, 3)).astype(dtype),
                                       rng.normal(size=20).astype(dtype), np.dtype(dtype))
    return x, filters, np.empty((5, 12, 10, 20), dtype)


def _convolve(x: np.ndarray, filters: tuple[np.ndarray, np.ndarray], out: np.ndarray
              ) -> np.ndarray:
    direct_conv.convolve(x, filters, out, (3, 3), (1, 1), (1, 1), (1, 1), relu=True)
    return out


def _expected(x: np.ndarray, filters: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    rows, bias = filters
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    n, h, w, c = x.shape
    windows = np.stack([padded[:, i:i + h, j:j + w] for i in range(3) for j in range(3)],
                       axis=3).reshape(n, h, w, 9 * c)  # (kh, kw, c), as the rows are
    return np.maximum(windows @ rows[:, :20] + bias[:20], 0)


@pytest.fixture
def threads():
    """Sets the thread count for one test, then restores the default."""
    yield cpu_threads.set_count
    cpu_threads.set_count(cpu_threads.available())


def test_the_tile_fits_the_registers_numba_compiles_for():
    wide = simd.has_avx512()
    tile = (direct_conv.VECTOR_BYTES, direct_conv.TILE_PIXELS, direct_conv.TILE_VECTORS)
    assert tile == ((64, 8, 1) if wide else (32, 4, 2))
    # Either way a block is 16 float32 or 8 float64 channels: packed filters agree.
    assert direct_conv.block_channels(np.dtype(np.float32)) == 16
    assert direct_conv.block_channels(np.dtype(np.float64)) == 8


def test_numba_reads_the_cpu_features_it_compiles_for(monkeypatch):
    from numba.core import config

    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,-avx512f,+avx512vl")
    assert simd.compiled_features() == {"avx2", "fma", "avx512vl"}
    assert not simd.has_avx512()
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+avx512f,+avx512vl")
    assert simd.has_avx512()


def test_the_avx2_tile_matches_the_reference_on_a_host_with_avx512(tmp_path):
    """Compiled for AVX2 (numba told the host has no AVX-512, with a cache of its
    own), the conv tests of this file and of the kernel tests pass with the 4 x 2 tile."""
    if not simd.has_avx512():
        pytest.skip("numba compiles for AVX2 here: every other conv test runs its tile")
    from numba.core.codegen import get_host_cpu_features

    features = ",".join(f"-{f[1:]}" if f[1:].startswith("avx512") else f
                        for f in get_host_cpu_features().split(","))
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": features,
           "NUMBA_CACHE_DIR": str(tmp_path)}
    tests = Path(__file__).parent
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-k", "(conv or tile or thread) and not avx512",
         str(tests / "test_cpu_direct_conv.py"), str(tests / "test_cpu_kernels.py")],
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " skipped" not in result.stdout


def test_any_thread_count_gives_the_same_bits(threads):
    x, filters, out = _problem()
    results = []
    for count in (1, 2, 3, 7):
        threads(count)
        results.append(_convolve(x, filters, out).copy())
    np.testing.assert_allclose(results[0], _expected(x, filters), rtol=1e-5, atol=1e-5)
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])  # each row: one thread, one order


def test_callers_in_several_threads_each_get_their_own_result(threads):
    threads(3)
    problems = [_problem(seed) for seed in range(4)]
    wanted = [_expected(x, filters) for x, filters, _ in problems]
    failures: list[str] = []

    def caller(index: int) -> None:
        x, filters, out = problems[index]
        for _ in range(20):
            got = _convolve(x, filters, out)
            if not np.allclose(got, wanted[index], rtol=1e-5, atol=1e-5):
                failures.append(f"caller {index}")

    workers = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not any(w.is_alive() for w in workers) and not failures


def _convolve_in_child(queue: multiprocessing.Queue) -> None:
    x, filters, out = _problem()
    queue.put(bool(np.allclose(_convolve(x, filters, out), _expected(x, filters),
                               rtol=1e-5, atol=1e-5)))


def test_a_forked_child_convolves_on_its_own_workers(threads):
    threads(2)
    x, filters, out = _problem()
    _convolve(x, filters, out)  # the parent's workers exist now
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue = context.Queue()
    child = context.Process(target=_convolve_in_child, args=(queue,))
    child.start()
    child.join(timeout=30)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "the child hung on its parent's (absent) worker threads"
    assert child.exitcode == 0 and queue.get(timeout=5)


def test_a_workers_error_reaches_the_caller_and_the_crew_goes_on():
    workers = Crew()
    ran: list[int] = []

    def fail() -> None:
        raise ValueError("from a worker")

    with pytest.raises(ValueError, match="from a worker"):
        workers.run([lambda: ran.append(0), fail])
    workers.run([lambda: ran.append(1), lambda: ran.append(2)])
    assert sorted(ran) == [0, 1, 2]


def test_an_interrupted_caller_waits_for_its_workers():
    workers = Crew()
    finished = threading.Event()

    def slow_worker() -> None:
        time.sleep(0.3)
        finished.set()

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        workers.run([interrupted, slow_worker])
    assert finished.is_set()  # no worker still writes into what the caller gave up
