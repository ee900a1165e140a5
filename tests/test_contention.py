"""Contention for the CPU during the timed calls (gobrrr/contention.py): the rule exact,
the measurement against a real CPU hog."""

import multiprocessing as mp
import os
import time

import pytest
import torch

from gobrrr.contention import Contention, watch_cpu


def test_threads_beyond_the_free_cores_are_a_finding_on_cpu():
    busy = Contention(cores=2, threads=2, wall_s=1.0, own_cores=0.9, other_cores=1.4)
    assert busy.free_cores == pytest.approx(0.6) and busy.contended
    assert busy.finding("cpu") == (
        "contention: other processes kept 1.4 of this machine's 2 cores busy during the "
        "timed calls, leaving ~0.6 for torch's 2 threads (this process used 0.9 cores): "
        "its time includes waiting for the CPU. Try torch.set_num_threads(1) (or "
        "OMP_NUM_THREADS), or a quieter machine")
    assert busy.finding("cuda") is None  # the GPU's work: not this rule
    # within half a core of the threads, one thread, or no measurement: no finding
    assert not Contention(2, 2, 1.0, 1.9, 0.4).contended
    assert not Contention(2, 1, 1.0, 0.9, 1.9).contended
    assert Contention(2, 2, 1.0, 0.9, None).finding("cpu") is None
    d = busy.to_dict()
    assert d["contended"] is True and d["free_cores"] == pytest.approx(0.6)


def _spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux's /proc/stat")
def test_a_cpu_hog_beside_the_timed_calls_is_measured_as_another_process():
    # one process spinning for the whole window: over 0.3 core of others time
    # (it is alone on a core for most of it, whatever else the machine runs), while this
    # process mostly sleeps (its own cores near 0)
    hog = mp.get_context("spawn").Process(target=_spin, args=(3.0,))
    hog.start()
    try:
        time.sleep(0.5)  # the hog is running
        with watch_cpu() as got:
            time.sleep(1.0)
    finally:
        hog.join()
    (c,) = got
    assert c.other_cores is not None and c.other_cores > 0.3, c
    assert c.own_cores < 0.3, c
    assert c.threads == torch.get_num_threads() and c.cores >= 1
