import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def _imports(*modules):
    """Whether every module imports: torchvision from PyPI is installed beside a CPU
    torch of another version raises at import (not ImportError), so catch everything."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            return False
    return True


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs CUDA (run on the GPU machine)")
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(skip)
    vision = [item for item in items if "vision" in item.keywords]
    if vision and not _imports("torchvision", "timm"):
        skip = pytest.mark.skip(reason="needs torchvision and timm (the models extra)")
        for item in vision:
            item.add_marker(skip)


def _calibrate_into(store: Path, **env: str) -> Path:
    """A real calibration of this CPU by the CLI in a child process (as a user's first
    run makes it), into the cache under `store`; returns the cache's gobrrr folder."""
    subprocess.run([sys.executable, "-m", "gobrrr", "calibrate", "--device", "cpu", "-q"],
                   env=dict(os.environ, XDG_CACHE_HOME=str(store), **env), check=True,
                   capture_output=True, timeout=600)
    return store / "gobrrr"


@pytest.fixture(scope="session")
def _cpu_calibration(tmp_path_factory) -> Path:
    """One calibration of this CPU for the whole session; every test gets a copy (see
    _isolated_cache). A calibration takes 13-40 s on the 2-core CI runner, and one per
    test that runs the doctor cost minutes of CI; the CPU's ceilings do not change within
    a session. Tests of calibration itself are marked `uncalibrated`."""
    return _calibrate_into(tmp_path_factory.mktemp("cpu-calibration"))


@pytest.fixture(scope="session")
def _one_thread_calibration(tmp_path_factory) -> Path:
    """The same for one thread (OMP_NUM_THREADS=1, as the torchrun tests' ranks run: the
    fingerprint holds the thread count, so the default calibration is not theirs)."""
    return _calibrate_into(tmp_path_factory.mktemp("cpu-calibration-1t"), OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def one_thread_cache(tmp_path_factory, _one_thread_calibration) -> Path:
    """A module's own XDG_CACHE_HOME for runs with OMP_NUM_THREADS=1, holding a copy of
    the session's one-thread calibration (filled before torchrun: rank 0 calibrating inside
    the run while its peer waits outlasted the tests' timeouts on 2 loaded cores)."""
    cache = tmp_path_factory.mktemp("cache")
    shutil.copytree(_one_thread_calibration, cache / "gobrrr")
    return cache


@pytest.fixture(scope="module")
def calibrated_cache(tmp_path_factory, _cpu_calibration) -> Path:
    """A module's own XDG_CACHE_HOME holding a copy of the session's CPU calibration, for
    module-scoped fixtures that run doctor or analyze once for many tests (each of them
    once gave its empty cache a calibration of its own: 10-40 s apiece on 2 cores)."""
    cache = tmp_path_factory.mktemp("cache")
    shutil.copytree(_cpu_calibration, cache / "gobrrr")
    return cache


@pytest.fixture(autouse=True)
def _isolated_cache(request, tmp_path, monkeypatch):
    # Never read or write the developer's real calibration cache from tests: each test
    # has its own, holding a copy of the session's CPU calibration unless it is marked
    # `uncalibrated` (then it starts empty, as on a machine gobrrr never ran on).
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    if request.node.get_closest_marker("uncalibrated") is None:
        shutil.copytree(request.getfixturevalue("_cpu_calibration"), cache / "gobrrr")


@pytest.fixture
def gobrrr_frames():
    """A function: the traceback lines of `text` that are frames of gobrrr's own code.
    By the package's directory, not by a "gobrrr/" substring: a clone in a folder named
    gobrrr (what `git clone .../gobrrr` makes) has that substring in every path."""
    import gobrrr

    pkg = str(Path(gobrrr.__file__).resolve().parent)

    def frames(text: str) -> list[str]:
        return [line for line in text.splitlines()
                if line.lstrip().startswith("File ") and f'"{pkg}' in line]
    return frames


@pytest.fixture
def cached_cpu_ceilings(_isolated_cache):
    """Plausible CPU ceilings cached as this machine's, for the thread count this process
    runs and for one thread (a script that calls torch.set_num_threads(1) calibrates for
    one thread: the fingerprint holds the count). A report needs ceilings, and a real
    calibration (10-40 s) is not what the tests using this check; child processes read
    the same cache (XDG_CACHE_HOME is set for them too)."""
    from gobrrr import hardware
    from gobrrr.hardware import Ceilings

    fp = hardware.fingerprint("cpu")
    for threads in dict.fromkeys([fp["threads"], "1"]):
        fp_t = dict(fp, threads=threads)
        ceil = Ceilings(device="cpu", fingerprint=fp_t,
                        peak_flops_per_s={"fp32": 2e11, "bf16": 2e11},
                        bandwidth_bytes_per_s=2e10, op_overhead_s=2e-6,
                        python_ops_per_s=5e7, measured_at="2026-12-01T00:00:00+00:00",
                        calibrate_s=0.0,
                        # a compiled call's cost left unmeasured, as where compiling
                        # fails: calibrate would otherwise compile to fill it in
                        details={"compiled_call_error": "not measured (test ceilings)"})
        hardware._save_cache(hardware._cache_path(fp_t), ceil, [])
    assert hardware.calibrate("cpu").op_overhead_s == 2e-6  # read, not measured


@pytest.fixture
def h200_calibration(_isolated_cache):
    """The H200's calibration of 2026-11-30 (benchmarks/results/h200/calibrate.json,
    schema 3: element-wise math rates included) cached as this machine's, so `analyze`
    of an H200 trace reads measured ceilings, as on that GPU. Returns the cached dict."""
    import json

    from gobrrr.hardware import cache_dir

    cal = json.loads((Path(__file__).parents[1] / "benchmarks" / "results" / "h200" /
                      "calibrate.json").read_text())
    cal.pop("datasheet")
    assert cal["schema_version"] == 3
    cache_dir().mkdir(parents=True, exist_ok=True)
    (cache_dir() / "ceilings-cuda-0123456789abcdef.json").write_text(json.dumps(cal))
    return cal


@pytest.fixture(autouse=True)
def _sigint_handler_kept():
    """Whatever a test leaves as the SIGINT handler is put back, and said: a handler set
    to SIG_IGN is inherited by every later subprocess of the same worker (the Ctrl-C
    tests then saw their interrupt ignored, in a run where tests landed after it)."""
    import signal
    import warnings

    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        warnings.warn(f"gobrrr-test: this test left the SIGINT handler as {after!r} "
                      f"(was {before!r}): put back", stacklevel=1)


@pytest.fixture(autouse=True)
def _torch_threads_kept():
    """Whatever thread count a test leaves torch with is put back, and said. A script
    that calls torch.set_num_threads(1), run by `gobrrr run` in the test's own process,
    left its worker at one thread; the calibration's fingerprint holds the count, so every
    later test of that worker calibrated again in place (25 of them, 12-18 s each, about
    3 minutes of a CI run on 2 workers)."""
    import warnings

    before = torch.get_num_threads()
    yield
    after = torch.get_num_threads()
    if after != before:
        torch.set_num_threads(before)
        warnings.warn(f"gobrrr-test: this test left torch at {after} thread(s) (was "
                      f"{before}): put back", stacklevel=1)


@pytest.fixture
def round_cuda_ceilings():
    """A CUDA machine of round numbers, for exact arithmetic in prediction tests: fp32 50,
    tf32 350, bf16 700 TFLOP/s; 1 TB/s; 5 us per tiny op."""
    from gobrrr.hardware import Ceilings

    return Ceilings(device="cuda", fingerprint={"name": "test"},
                    peak_flops_per_s={"fp32": 50e12, "tf32": 350e12, "bf16": 700e12},
                    bandwidth_bytes_per_s=1e12, op_overhead_s=5e-6, python_ops_per_s=1e7,
                    measured_at="t", calibrate_s=0.0)
