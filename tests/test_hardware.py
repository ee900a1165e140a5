"""Ceilings: cache behaviour (exact, with a fake measurement) and one real CPU run."""

import json
import os

import pytest

from gobrrr import datasheet, hardware
from gobrrr.hardware import Ceilings

# These tests are of the cache and of calibration itself: each starts with an empty cache.
pytestmark = pytest.mark.uncalibrated


def fake_ceilings(device="cpu"):
    return Ceilings(
        device=device, fingerprint=hardware.fingerprint(device),
        peak_flops_per_s={"fp32": 1e11}, bandwidth_bytes_per_s=2e10, op_overhead_s=3e-6,
        python_ops_per_s=3e7, measured_at="2026-01-01T00:00:00+00:00", calibrate_s=0.1,
        exp_elems_per_s={"fp32": 1e9}, softmax_elems_per_s={"fp32": 5e8},
        compiled_call_s=2e-5, compiled_tensor_s=1e-6,
    )


@pytest.fixture
def counted_measure(monkeypatch):
    calls = []

    def fake(device, progress):
        calls.append(device)
        return fake_ceilings(device)

    monkeypatch.setattr(hardware, "_measure", fake)
    return calls


def test_second_call_reads_the_cache(counted_measure):
    first = hardware.calibrate("cpu")
    second = hardware.calibrate("cpu")
    assert counted_measure == ["cpu"]
    assert first.source == "measured" and second.source == "cache"
    assert second.peak_flops_per_s == {"fp32": 1e11}
    hardware.calibrate("cpu", force=True)
    assert counted_measure == ["cpu", "cpu"]


def test_cache_lives_under_xdg_cache_home(counted_measure, tmp_path):
    hardware.calibrate("cpu")
    files = list((tmp_path / "cache" / "gobrrr").glob("ceilings-cpu-*.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["peak_flops_per_s"] == {"fp32": 1e11}


def test_corrupt_cache_is_remeasured_with_a_note(counted_measure, tmp_path):
    hardware.calibrate("cpu")
    (path,) = (tmp_path / "cache" / "gobrrr").glob("*.json")
    path.write_text("{not json")
    again = hardware.calibrate("cpu")
    assert counted_measure == ["cpu", "cpu"]
    assert any("unreadable" in n for n in again.notes)


def _cache_file(tmp_path):
    (path,) = (tmp_path / "cache" / "gobrrr").glob("*.json")
    return path


def _set(d, path, value):
    for key in path[:-1]:
        d = d[key]
    if value is _DELETE:
        del d[path[-1]]
    else:
        d[path[-1]] = value


_DELETE = object()


# Valid JSON, bad values: each used to crash every run (or, for NaN, poison every verdict).
@pytest.mark.parametrize("path, value, says", [
    (("bandwidth_bytes_per_s",), 0, "bandwidth_bytes_per_s"),
    (("bandwidth_bytes_per_s",), -2e10, "bandwidth_bytes_per_s"),
    (("bandwidth_bytes_per_s",), "fast", "bandwidth_bytes_per_s"),
    (("bandwidth_bytes_per_s",), _DELETE, "'bandwidth_bytes_per_s' is a required property"),
    (("peak_flops_per_s",), _DELETE, "'peak_flops_per_s' is a required property"),
    (("peak_flops_per_s", "fp32"), -1e11, "peak_flops_per_s/fp32"),
    (("peak_flops_per_s", "fp32"), "1e11", "peak_flops_per_s/fp32"),
    (("peak_flops_per_s", "fp32"), _DELETE, "'fp32' is a required property"),
    (("peak_flops_per_s", "fp32"), float("nan"), "peak_flops_per_s/fp32 is not a finite"),
    (("bandwidth_bytes_per_s",), float("inf"), "bandwidth_bytes_per_s is not a finite"),
    (("op_overhead_s",), 0, "op_overhead_s"),
    (("python_ops_per_s",), None, "python_ops_per_s"),
    (("bandwidth_by_kernel",), _DELETE, "'bandwidth_by_kernel' is a required property"),
    (("bandwidth_by_kernel", "sum"), 0, "bandwidth_by_kernel/sum"),
    (("device",), "cuda", "device 'cuda', not 'cpu'"),
    (("fingerprint",), "x", "fingerprint"),
    # issue 28: figures no machine measures were used as measured
    (("peak_flops_per_s", "fp32"), 1e-300, "peak_flops_per_s/fp32 is 1e-300, outside"),
    (("bandwidth_bytes_per_s",), 1e30, "bandwidth_bytes_per_s is 1e+30, outside"),
    (("op_overhead_s",), 5.0, "op_overhead_s is 5, outside"),
])
def test_invalid_cache_is_remeasured_and_overwritten(counted_measure, tmp_path, path, value,
                                                     says):
    hardware.calibrate("cpu")
    cache = _cache_file(tmp_path)
    data = json.loads(cache.read_text())
    _set(data, path, value)
    cache.write_text(json.dumps(data))
    again = hardware.calibrate("cpu")
    assert counted_measure == ["cpu", "cpu"]  # re-measured
    assert again.source == "measured" and again.bandwidth_bytes_per_s == 2e10
    (note,) = [n for n in again.notes if "invalid" in n]
    assert says in note and "\n" not in note
    # overwritten with the fresh measurement: the next run reads it
    third = hardware.calibrate("cpu")
    assert counted_measure == ["cpu", "cpu"] and third.source == "cache"


def test_a_cache_naming_another_machine_is_remeasured(counted_measure, tmp_path):
    # issue 28: a cache file at this machine's path whose fingerprint named another CPU
    # was used, and the report said "on Intel Xeon"
    hardware.calibrate("cpu")
    cache = _cache_file(tmp_path)
    data = json.loads(cache.read_text())
    data["fingerprint"]["name"] = "Another CPU"
    cache.write_text(json.dumps(data))
    again = hardware.calibrate("cpu")
    assert counted_measure == ["cpu", "cpu"] and again.source == "measured"
    assert any("was measured on 'Another CPU'" in n for n in again.notes)


def test_cache_that_is_not_an_object_is_remeasured(counted_measure, tmp_path):
    hardware.calibrate("cpu")
    _cache_file(tmp_path).write_text("[1, 2]")
    again = hardware.calibrate("cpu")
    assert counted_measure == ["cpu", "cpu"]
    assert any("invalid (a JSON list, not an object)" in n for n in again.notes)


def test_cache_from_another_version_is_remeasured(counted_measure, tmp_path):
    hardware.calibrate("cpu")
    cache = _cache_file(tmp_path)
    cache.write_text(json.dumps(json.loads(cache.read_text()) | {"schema_version": 1}))
    again = hardware.calibrate("cpu")
    assert counted_measure == ["cpu", "cpu"]
    assert any("another gobrrr version" in n for n in again.notes)


def _write_cache(name, data):
    path = hardware.cache_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_caches_of_versions_1_and_2_are_not_read():
    # Version 3 added the element-wise math rates: an older cache lacks them, on either
    # device, and is re-measured (calibrate) or passed over (analyze's cached_for).
    for version in (1, 2):
        old = fake_ceilings("cpu").to_dict() | {"schema_version": version, "device": "cuda"}
        old["fingerprint"] = {"device": "cuda", "torch": "x", "python": "3", "name": "GPU X"}
        for key in ("datasheet", "exp_elems_per_s", "softmax_elems_per_s"):
            del old[key]
        _write_cache("ceilings-cuda-0123456789abcdef.json", old)
        assert hardware.cached_for("cuda", "GPU X") is None
    current = fake_ceilings("cpu").to_dict() | {"device": "cuda"}
    current["fingerprint"] = {"device": "cuda", "torch": "x", "python": "3", "name": "GPU X"}
    del current["datasheet"]
    _write_cache("ceilings-cuda-0123456789abcdef.json", current)
    c = hardware.cached_for("cuda", "GPU X")
    assert c is not None and c.exp_elems_per_s == {"fp32": 1e9}


def test_valid_cache_gives_no_note(counted_measure):
    hardware.calibrate("cpu")
    again = hardware.calibrate("cpu")
    assert again.source == "cache" and not any("invalid" in n for n in again.notes)


def test_llc_size_from_sysfs(tmp_path):
    for name, level, kind, size in (("index0", 1, "Data", "48K"),
                                    ("index1", 1, "Instruction", "32K"),
                                    ("index2", 2, "Unified", "2048K"),
                                    ("index3", 3, "Unified", "307200K")):
        d = tmp_path / name
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert hardware._llc_bytes(tmp_path) == (300 * 2**20, "sysfs L3")
    (tmp_path / "index3" / "size").write_text("garbage")
    assert hardware._llc_bytes(tmp_path) == (2 * 2**20, "sysfs L2")


def test_llc_size_default_when_unknown(tmp_path, monkeypatch):
    def no_sysconf(name):
        raise ValueError(name)

    monkeypatch.setattr(hardware.os, "sysconf", no_sysconf)
    assert hardware._llc_bytes(tmp_path / "absent") == (32 * 2**20,
                                                         "default (cache size unknown)")


def test_cache_size_parsing():
    assert hardware._parse_cache_size("48K") == 48 * 1024
    assert hardware._parse_cache_size("32M\n") == 32 * 2**20
    assert hardware._parse_cache_size("1G") == 2**30
    assert hardware._parse_cache_size("65536") == 65536


def test_probe_size_is_4x_llc_within_memory_caps():
    mib, gib = 2**20, 2**30
    assert hardware._cpu_probe_bytes(300 * mib, 24 * gib) == 1200 * mib
    assert hardware._cpu_probe_bytes(32 * mib, 24 * gib) == 256 * mib  # floor: 256 MiB
    assert hardware._cpu_probe_bytes(1024 * mib, 256 * gib) == 2 * gib  # 2 GiB per tensor
    assert hardware._cpu_probe_bytes(300 * mib, 8 * gib) == 512 * mib  # 1/16 of memory
    assert hardware._cpu_probe_bytes(300 * mib, 24 * gib + 12345) % mib == 0


def test_cpu_roof_is_the_best_honest_probe(monkeypatch):
    # Exact, with stubbed measurements: the roof is the max of the probes, all kept.
    probes = {"sum": 6e10, "add_": 5e10, "copy_": 4.5e10}
    seen = []
    monkeypatch.setattr(hardware, "_matmul_flops_per_s", lambda *a, **k: 1e11)
    monkeypatch.setattr(hardware, "_cpu_bf16_runs", lambda: False)
    monkeypatch.setattr(hardware, "_op_overhead_s", lambda *a, **k: 2e-6)
    monkeypatch.setattr(hardware, "_python_ops_per_s", lambda *a, **k: 3e7)
    monkeypatch.setattr(hardware, "_llc_bytes", lambda: (300 * 2**20, "test"))
    monkeypatch.setattr(hardware, "_phys_mem_bytes", lambda: 24 * 2**30)

    def fake_bandwidths(nbytes, budget_s):
        seen.append(nbytes)
        return dict(probes)

    monkeypatch.setattr(hardware, "_cpu_bandwidths", fake_bandwidths)
    math_calls = []

    def fake_math(device, dtype, n_elems, budget_s):
        math_calls.append((device, dtype, n_elems))
        return {"exp": 2e9, "softmax": 1e9}

    monkeypatch.setattr(hardware, "_math_elems_per_s", fake_math)
    c = hardware.calibrate("cpu")
    # bf16 does not run here (stubbed), so only fp32 is probed, at 2^24 elements
    assert math_calls == [("cpu", "fp32", 2**24)]
    assert c.exp_elems_per_s == {"fp32": 2e9} and c.softmax_elems_per_s == {"fp32": 1e9}
    assert c.details["math_elems"] == 2**24 and c.details["math_row"] == 4096
    assert seen == [1200 * 2**20]
    assert c.bandwidth_bytes_per_s == 6e10 and c.bandwidth_kernel == "sum"
    assert c.bandwidth_by_kernel == probes
    assert c.details["bandwidth_bytes"] == 1200 * 2**20 and c.details["llc_bytes"] == 300 * 2**20
    cached = hardware.calibrate("cpu")
    assert cached.source == "cache" and cached.bandwidth_by_kernel == probes
    assert cached.softmax_elems_per_s == {"fp32": 1e9}


def test_math_bytes_per_s_is_read_plus_write_at_the_dtype_size():
    c = fake_ceilings()
    c.softmax_elems_per_s = {"bf16": 1e9, "fp32": 5e8}
    # bf16: 1e9 elem/s x (2 B read + 2 B written) = 4e9 B/s; fp32: 5e8 x 8 B = 4e9 B/s
    assert c.math_bytes_per_s("softmax", "bf16") == 4e9
    assert c.math_bytes_per_s("softmax", "fp32") == 4e9
    assert c.math_elems_per_s("softmax", "fp16") is None
    assert c.math_bytes_per_s("softmax", "fp16") is None
    assert c.math_elems_per_s("exp", "fp32") == 1e9


def test_math_probes_run_small():
    # Real kernels on a small tensor (16 rows of 4096): each gives a sane, positive rate.
    for dtype in ("fp32", "bf16"):
        rates = hardware._math_elems_per_s("cpu", dtype, 2**16, budget_s=0.05)
        assert set(rates) == {"exp", "softmax"}
        assert all(1e6 < r < 1e13 for r in rates.values()), rates


@pytest.mark.serial
def test_cpu_bandwidth_probes_run_small():
    # Real kernels on a small (cache-resident) tensor: each probe gives a sane rate.
    bw = hardware._cpu_bandwidths(8 * 2**20, budget_s=0.1)
    assert set(bw) == {"sum", "add_", "copy_"}
    assert all(5e8 < v < 1e13 for v in bw.values())


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_cache_only_loses_the_cache(counted_measure, tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    monkeypatch.setenv("XDG_CACHE_HOME", str(ro))
    c = hardware.calibrate("cpu")
    assert c.peak_flops_per_s == {"fp32": 1e11}
    assert any("not cached" in n for n in c.notes)


def test_cache_dir_that_is_a_file_only_loses_the_cache(counted_measure, tmp_path, monkeypatch):
    # Works as root too: a regular file where the cache directory should be.
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    c = hardware.calibrate("cpu")
    assert c.bandwidth_bytes_per_s == 2e10
    assert any("not cached" in n for n in c.notes)


def test_unknown_device_rejected():
    with pytest.raises(ValueError):
        hardware.calibrate("tpu")


def test_datasheet_lookup():
    assert datasheet.lookup("NVIDIA H200").name == "H200 SXM"
    assert datasheet.lookup("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert datasheet.lookup("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert datasheet.lookup("NVIDIA A100-SXM4-80GB").name == "A100 80GB"
    assert datasheet.lookup("NVIDIA A100-SXM4-40GB").name == "A100 40GB"
    assert datasheet.lookup("NVIDIA A10").name == "A10"
    assert datasheet.lookup("NVIDIA L4").name == "L4"
    assert datasheet.lookup("Tesla V100-SXM2-16GB").name == "V100"
    assert datasheet.lookup("Tesla T4").name == "T4"
    assert datasheet.lookup("NVIDIA GeForce RTX 4090").name == "RTX 4090"
    assert datasheet.lookup("NVIDIA GeForce RTX 3090").name == "RTX 3090"
    assert datasheet.lookup("Some Future GPU") is None
    for e in datasheet.DATASHEET:
        assert e.source and e.bandwidth_bytes_per_s > 0 and "fp32" in e.peak_flops_per_s


def test_real_cpu_calibration_is_sane():
    # Real measurement on this CPU. Ranges are loose on purpose: any CPU this runs on does
    # between 1 GFLOP/s and 100 TFLOP/s of fp32 matmul and copies 0.5 GB/s to 2 TB/s.
    c = hardware.calibrate("cpu")
    assert 1e9 < c.peak_flops_per_s["fp32"] < 1e14
    assert 5e8 < c.bandwidth_bytes_per_s < 2e12
    assert set(c.bandwidth_by_kernel) == {"sum", "add_", "copy_"}
    assert c.bandwidth_bytes_per_s == max(c.bandwidth_by_kernel.values())
    assert c.bandwidth_by_kernel[c.bandwidth_kernel] == c.bandwidth_bytes_per_s
    assert c.details["bandwidth_bytes"] >= 2**28
    assert 1e-8 < c.op_overhead_s < 1e-3
    assert 1e5 < c.python_ops_per_s < 1e10
    # element-wise math: fp32 always, bf16 where its matmul runs; 1 M to 10 T elements/s
    assert "fp32" in c.exp_elems_per_s and "fp32" in c.softmax_elems_per_s
    assert set(c.exp_elems_per_s) == set(c.softmax_elems_per_s)
    assert all(1e6 < r < 1e13 for r in [*c.exp_elems_per_s.values(),
                                        *c.softmax_elems_per_s.values()])
    assert c.details["math_elems"] == 2**24
    assert c.calibrate_s < 60


@pytest.mark.cuda
def test_real_cuda_calibration_is_sane():
    c = hardware.calibrate("cuda", force=True)
    assert set(c.peak_flops_per_s) == {"bf16", "fp16", "tf32", "fp32"}
    # tensor cores: bf16 beats plain fp32 by several x on every GPU since Ampere
    assert c.peak_flops_per_s["bf16"] > 3 * c.peak_flops_per_s["fp32"]
    assert c.calibrate_s < 20
    assert c.bandwidth_kernel == "copy_" and set(c.bandwidth_by_kernel) == {"copy_"}
    assert set(c.exp_elems_per_s) == set(c.softmax_elems_per_s) == {"fp32", "bf16", "fp16"}
