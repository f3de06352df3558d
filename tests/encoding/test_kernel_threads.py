"""``kernel_threads``: halves on two threads give what one thread gives, errors keep their
order, and a forked child gets a helper thread of its own."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lance_spark_ops.encoding.compression import compiled, fsst_encode, kernel_threads
from lance_spark_ops.encoding.tuning import CodecTuning
from tests.encoding._fresh import run_fresh


def test_second_runs_on_the_helper_and_results_keep_their_order() -> None:
    a, b = kernel_threads.both(lambda: ("a", threading.current_thread().name),
                               lambda: ("b", threading.current_thread().name))
    assert a == ("a", threading.current_thread().name)
    assert b[0] == "b" and b[1].startswith("lso-kernel")


def test_the_first_error_wins_and_the_second_half_has_stopped() -> None:
    done = threading.Event()

    def second() -> None:
        done.wait(10)
        raise ValueError("second")

    def first() -> None:
        done.set()
        raise KeyError("first")

    with pytest.raises(KeyError, match="first"):
        kernel_threads.both(first, second)
    with pytest.raises(ValueError, match="second"):
        kernel_threads.both(lambda: 1, second)


def test_small_inputs_and_the_switch_keep_one_thread() -> None:
    on = CodecTuning(split_threads=True)
    assert kernel_threads.worth_splitting(on.split_min_bytes, on)
    assert not kernel_threads.worth_splitting(on.split_min_bytes - 1, on)
    assert not kernel_threads.worth_splitting(1 << 40, CodecTuning(split_threads=False))


def test_a_forked_child_starts_its_own_helper() -> None:
    """In a fresh interpreter (no other threads to fork from): the parent's helper runs, the
    process forks (as Spark's daemon forks workers), and the child's halves still run."""
    script = (
        "import os, threading\n"
        "from lance_spark_ops.encoding.compression import kernel_threads as kt\n"
        "kt.both(lambda: 0, lambda: 0)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    _, name = kt.both(lambda: 0, lambda: threading.current_thread().name)\n"
        "    print('child', name, flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    out = run_fresh(script, timeout=60)
    assert out.stdout.startswith("child lso-kernel"), out.stdout


def _strings(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` strings of 0-80 bytes: words, random bytes (escapes) and empty strings."""
    rng = np.random.default_rng(seed)
    words = [b"lance", b"spark", b"column ", b"\xff\x00page", b"zip"]
    parts = []
    for i in range(n):
        k = int(rng.integers(0, 9))
        s = b"".join(words[j] for j in rng.integers(0, len(words), k))
        if i % 7 == 0:
            s += rng.integers(0, 256, int(rng.integers(0, 40)), dtype=np.uint8).tobytes()
        parts.append(s)
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum([len(p) for p in parts])
    return np.frombuffer(b"".join(parts), np.uint8), offsets


@pytest.mark.parametrize("seed", [0, 1])
def test_a_page_compressed_in_halves_equals_the_numpy_code(seed: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A page past ``split_min_bytes`` (default thresholds) compresses in halves on two threads
    to the bytes and offsets the numpy reference gives for the whole page."""
    defaults = CodecTuning(split_threads=True)
    assert compiled.fsst_kernels(defaults.compiled_min_bytes, defaults) is not None, \
        "numba kernels did not load"
    data, offsets = _strings(60_000, seed)
    assert data.size > defaults.split_min_bytes
    table, _ = fsst_encode.build_table(data, offsets)
    halves = []
    real_both = kernel_threads.both

    def counting_both(first, second):  # noqa: ANN001, ANN202
        halves.append(1)
        return real_both(first, second)

    monkeypatch.setattr(kernel_threads, "both", counting_both)
    got = fsst_encode._compress_all(table, data, offsets, defaults)
    assert halves, "the page was not split"
    numpy_only = CodecTuning(compiled_min_bytes=1 << 62, compiled_loaded_min_bytes=1 << 62)
    want = fsst_encode._compress_all(table, data, offsets, numpy_only)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
