"""Topology parsing, nccl-tests' bandwidth factors, the busbw lookup, the cache, and one
real 2-rank gloo run under torchrun (`gobrrr calibrate --distributed --json`)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gobrrr import datasheet
from gobrrr.cli import cli
from gobrrr.dist import ceilings as cm
from gobrrr.dist import topology as tp
from gobrrr.dist.ceilings import CollectivePoint, CommCeilings, busbw_factor
from gobrrr.schema import SchemaError, kind_of, validate

TOPO = Path(__file__).parent / "data" / "topo"


# ---------------------------------------------------------------- topology parser


def test_two_h200_nv18():
    # Laid out as nvidia-smi topo -m prints it (tabs, legend); H200 SXM has 18 NVLink 4 links.
    parsed = tp.parse_topo_matrix((TOPO / "h200x2_nv18.txt").read_text())
    assert parsed["gpus"] == ["GPU0", "GPU1"]
    assert parsed["links"] == {"0-1": {"code": "NV18", "type": "NVLink", "nvlinks": 18}}
    assert tp.link_summary(parsed["links"]) == "NVLink"


def test_one_gpu_has_no_links():
    parsed = tp.parse_topo_matrix((TOPO / "one_gpu.txt").read_text())
    assert parsed == {"gpus": ["GPU0"], "links": {}}
    assert tp.link_summary(parsed["links"]) == "none"
    # The bare row of the brief, with spaces instead of tabs.
    bare = "        GPU0    CPU Affinity    NUMA Affinity   GPU NUMA ID\nGPU0 X 0-15 0 N/A\n"
    assert tp.parse_topo_matrix(bare) == {"gpus": ["GPU0"], "links": {}}


def test_pcie_gpus_with_a_nic_and_ansi_bold_header():
    text = (TOPO / "pcie_3gpu_nic.txt").read_text()
    text = text.replace("\tGPU0\tGPU1", "\t\x1b[4mGPU0\tGPU1", 1)  # bold/underline escapes
    parsed = tp.parse_topo_matrix(text)
    assert parsed["gpus"] == ["GPU0", "GPU1", "GPU2"]  # NIC0 is no GPU
    assert {k: v["code"] for k, v in parsed["links"].items()} == {
        "0-1": "PIX", "0-2": "SYS", "1-2": "SYS"}
    assert tp.link_summary(parsed["links"]) == "PCIe"
    assert tp.link_summary(parsed["links"], indices=[0, 1]) == "PCIe"


def test_mixed_links_and_unknown_codes():
    links = {"0-1": tp._link_of("NV4"), "0-2": tp._link_of("PHB"),
             "1-2": tp._link_of("XYZ")}
    assert links["0-1"]["nvlinks"] == 4
    assert links["1-2"]["type"] == "unknown"
    assert tp.link_summary(links) == "mixed"
    assert tp.link_summary(links, indices=[0, 1]) == "NVLink"


def test_text_without_a_matrix_is_refused():
    with pytest.raises(ValueError, match="no GPU matrix"):
        tp.parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate")


def test_nccl_env_and_visible_devices():
    env = {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1", "PATH": "/bin", "XNCCL_A": "x"}
    assert tp.nccl_env(env) == {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}
    assert tp.visible_gpu_indices(4, {}) == [0, 1, 2, 3]
    assert tp.visible_gpu_indices(4, {"CUDA_VISIBLE_DEVICES": "2,3"}) == [2, 3]
    assert tp.visible_gpu_indices(4, {"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == [0, 1, 2, 3]
    assert tp.visible_gpu_indices(4, {"CUDA_VISIBLE_DEVICES": ""}) == []


class _Pci:
    def __init__(self, bus):
        self.busId = bus


_BUSES = [b"00000000:18:00.0", b"00000000:2A:00.0"]


def _fake_pynvml(monkeypatch, remote_bus):
    """Two H200s, 18 active NVLinks each; `remote_bus(gpu, link)` is where a link ends."""
    import types

    fake = types.SimpleNamespace(
        NVML_FEATURE_ENABLED=1, NVML_NVLINK_MAX_LINKS=18,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetPciInfo=lambda h: _Pci(_BUSES[h]),
        nvmlDeviceGetNvLinkState=lambda h, link: 1,
        nvmlDeviceGetNvLinkRemotePciInfo=lambda h, link: _Pci(remote_bus(h, link)),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)


def test_nvml_links_from_a_fake_pynvml(monkeypatch):
    """Two GPUs, 18 active links each, all to the other one: NV18 both ways."""
    _fake_pynvml(monkeypatch, lambda h, link: _BUSES[1 - h].lower())
    got = tp._nvml_links()
    assert got == {"gpus": ["NVIDIA H200", "NVIDIA H200"],
                   "links": {"0-1": {"code": "NV18", "type": "NVLink", "nvlinks": 18}}}


def test_nvml_links_through_nvswitches(monkeypatch):
    """HGX H200: every active link of each GPU ends at an NVSwitch (a bus id that is no
    GPU's), as NVML reported on the device machine; the pair is NVLink x18 (what
    nvidia-smi topo -m printed there: NV18), not PCIe."""
    _fake_pynvml(monkeypatch, lambda h, link: f"00000000:{0xC0 + link:02X}:00.0")
    assert tp._nvml_links()["links"] == {"0-1": {"code": "NV18", "type": "NVLink",
                                                 "nvlinks": 18}}


def test_topology_on_cpu(monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    t = tp.topology()
    assert t["device"] == "cpu" and t["backend"] == "gloo" and t["nccl_version"] is None
    assert t["gpu_count"] == 0 and t["link_type"] == "none" and t["world_size"] == 1
    assert t["nccl_env"]["NCCL_SOCKET_IFNAME"] == "lo"
    key = tp.topology_key(t)
    assert key["gpu_names"] == [t["cpu_name"]]


# ---------------------------------------------------------------- bandwidth arithmetic


def test_busbw_factors_are_nccl_tests():
    # doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n.
    assert busbw_factor("all_reduce", 2) == 1.0  # 2*1/2
    assert busbw_factor("all_reduce", 8) == 1.75  # 2*7/8
    assert busbw_factor("all_gather", 2) == 0.5  # 1/2
    assert busbw_factor("reduce_scatter", 8) == 0.875  # 7/8
    assert busbw_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("broadcast", 2)


def test_sizes_and_size_parsing():
    assert cm.default_sizes(2**20) == [2**k for k in range(10, 21)]  # 1 KiB .. 1 MiB: 11
    assert len(cm.default_sizes(2**30)) == 21
    assert cm.default_sizes(3000, 1024) == [1024, 2048]  # rounded down to powers of 2
    assert cm.parse_size("1MiB") == 2**20
    assert cm.parse_size("64K") == 65536
    assert cm.parse_size("1GB") == 10**9
    assert cm.parse_size("4096") == 4096
    for bad in ("", "-1K", "1XB", "nanK"):
        with pytest.raises(cm.UserError):
            cm.parse_size(bad)
    # all-gather/reduce-scatter S: n equal parts of whole fp32 elements.
    assert cm._buffers_size(1024, 3) == 1020  # 1024 // 12 = 85 per rank; 85*3*4 = 1020


def _ceilings(points, world_size=2, topo=None):
    topo = topo or {"device": "cuda", "gpu_names": ["NVIDIA H200", "NVIDIA H200"],
                    "gpu_count": 2, "link_type": "NVLink", "nvlinks": 18,
                    "links": {"0-1": {"code": "NV18", "type": "NVLink", "nvlinks": 18}},
                    "link_source": "nvidia-smi", "nccl_version": "2.27.3", "nccl_env": {},
                    "world_size": world_size, "local_world_size": world_size,
                    "backend": "nccl", "notes": []}
    return CommCeilings(topology=topo, key=cm._cache_key(topo), world_size=world_size,
                        backend="nccl", dtype="fp32", points=points,
                        measured_at="2026-11-30T00:00:00+00:00", calibrate_s=1.0)


def _point(collective, size, busbw, n=2):
    algbw = busbw / busbw_factor(collective, n)
    return CollectivePoint(collective, size, size / algbw, algbw, busbw, 3, 1)


def test_busbw_is_interpolated_in_log_size():
    ceil = _ceilings([_point("all_reduce", 2**20, 100e9), _point("all_reduce", 2**22, 300e9),
                      _point("all_gather", 2**20, 50e9)])
    # 2 MiB is halfway between 1 and 4 MiB in log2 (20, 21, 22): 100 + 0.5*200 = 200 GB/s.
    assert ceil.busbw_at("all_reduce", 2**21) == pytest.approx(200e9, rel=1e-12)
    # Outside the sweep: the end's figure.
    assert ceil.busbw_at("all_reduce", 1) == 100e9
    assert ceil.busbw_at("all_reduce", 2**40) == 300e9
    # time at 4 MiB: algbw = 300e9 / 1 (n=2) -> 4194304 / 300e9 s
    assert ceil.time_at("all_reduce", 2**22) == pytest.approx(2**22 / 300e9, rel=1e-12)
    assert cm.lookup_busbw("all_gather", 2**21, ceil) == 50e9
    assert cm.lookup_busbw("reduce_scatter", 2**21, ceil) is None
    with pytest.raises(KeyError):
        ceil.busbw_at("reduce_scatter", 1)


def test_datasheet_nvlink_per_direction():
    e = datasheet.lookup_interconnect("NVIDIA H200", "NVLink")
    assert e is not None and e.bytes_per_s_per_direction == 450e9  # 900 GB/s / 2
    assert datasheet.lookup_interconnect("NVIDIA H100 80GB HBM3", "NVLink").name.startswith(
        "H100 SXM")
    assert datasheet.lookup_interconnect("NVIDIA H100 PCIe", "NVLink") is None
    assert datasheet.lookup_interconnect("NVIDIA H100 PCIe", "PCIe").name == "PCIe 5.0 x16"
    assert datasheet.INTER_NODE_DEFAULT.bytes_per_s_per_direction == 400e9  # 8 x 400 Gb/s


def test_to_dict_validates_and_carries_the_datasheet():
    ceil = _ceilings([_point(c, 2**20, 100e9) for c in cm.COLLECTIVES])
    d = ceil.to_dict()
    assert kind_of(d) == "comm_ceilings"
    validate(d)
    assert d["datasheet"]["bytes_per_s_per_direction"] == 450e9
    bad = json.loads(json.dumps(d))
    bad["points"][0]["collective"] = "broadcast"
    with pytest.raises(SchemaError, match="points/0/collective"):
        validate(bad)
    assert CommCeilings.from_dict(d).points == ceil.points
    from gobrrr.show.dist_figures import comm_ceilings_svg

    svg = comm_ceilings_svg(d)
    assert svg.startswith("<svg") and "datasheet 450 GB/s per direction" in svg
    assert "bus bandwidth (GB/s)" in svg


def test_cache_round_trip_under_xdg_cache_home(tmp_path):
    ceil = _ceilings([_point("all_reduce", 2**20, 123e9)])
    path = cm.cache_path(ceil.key)
    assert path.parent == tmp_path / "cache" / "gobrrr"  # conftest sets XDG_CACHE_HOME
    notes: list[str] = []
    cm._write(path, ceil, notes)
    assert notes == []
    back = cm.load_cached(ceil.topology)
    assert back is not None and back.source == "cache"
    assert back.points == ceil.points
    assert cm.lookup_busbw("all_reduce", 2**20, back) == 123e9
    # NCCL_DEBUG only changes logging: same key, same cache.
    noisy = dict(ceil.topology, nccl_env={"NCCL_DEBUG": "INFO"})
    assert cm.load_cached(noisy) is not None
    # NCCL_ALGO changes the algorithm: another key, no cache.
    assert cm.load_cached(dict(ceil.topology, nccl_env={"NCCL_ALGO": "Tree"})) is None
    # A corrupt file is refused with a note, never read as ceilings.
    path.write_text(json.dumps(dict(json.loads(path.read_text()), points=[])))
    notes = []
    assert cm._read(path, notes) is None and "invalid" in notes[0]


# ---------------------------------------------------------------- CLI


def test_distributed_without_torchrun_is_one_line_exit_2(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    r = CliRunner().invoke(cli, ["calibrate", "--distributed"])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "torchrun --nproc-per-node N" in r.stderr
    r = CliRunner().invoke(cli, ["calibrate", "--nproc-per-node", "2"])
    assert r.exit_code == 2 and "goes with --distributed" in r.stderr
    r = CliRunner().invoke(cli, ["calibrate", "--distributed", "--max-size", "big"])
    assert r.exit_code == 2 and "size 'big'" in r.stderr


def _torchrun(args, tmp_path, timeout_s=120):
    env = dict(os.environ, OMP_NUM_THREADS="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "-m", "gobrrr", *args],
                          capture_output=True, text=True, timeout=timeout_s, env=env)


@pytest.mark.serial
@pytest.mark.slow
def test_two_gloo_ranks_under_torchrun(tmp_path):
    args = ["calibrate", "--distributed", "--json", "-q", "--max-size", "64KiB"]
    r = _torchrun(args, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout)  # rank 0 alone prints: one JSON document
    validate(d, "comm_ceilings")
    assert d["world_size"] == 2 and d["backend"] == "gloo" and d["source"] == "measured"
    assert d["topology"]["device"] == "cpu" and d["datasheet"] is None
    sizes = [2**k for k in range(10, 17)]  # 1 KiB .. 64 KiB
    for c in cm.COLLECTIVES:
        pts = [p for p in d["points"] if p["collective"] == c]
        assert [p["size_bytes"] for p in pts] == sizes
        for p in pts:
            # the JSON keeps a table row's floats to 6 significant digits (jsontext), so
            # the relations hold to that: well under any error in the formulas
            assert p["algbw_bytes_per_s"] == pytest.approx(p["size_bytes"] / p["time_s"],
                                                           rel=1e-5)
            # algbw x factor: 2(n-1)/n = 1 for all-reduce, (n-1)/n = 1/2 otherwise
            assert p["busbw_bytes_per_s"] == pytest.approx(
                p["algbw_bytes_per_s"] * busbw_factor(c, 2), rel=1e-5)
            assert p["samples"] >= 3 and math.isfinite(p["time_s"])
    # Rank 0 wrote the cache; a second run reads it (no collective timed again).
    (cache,) = (tmp_path / "cache" / "gobrrr").glob("comm-gloo-*.json")
    r2 = _torchrun(args, tmp_path)
    assert r2.returncode == 0, r2.stderr[-3000:]
    d2 = json.loads(r2.stdout)
    assert d2["source"] == "cache" and d2["points"] == d["points"]
    assert str(cache) in d2["notes"][0]


@pytest.mark.slow
def test_nproc_per_node_starts_torchrun_and_prints_the_table(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", XDG_CACHE_HOME=str(tmp_path / "cache"),
               COLUMNS="100")
    env.pop("WORLD_SIZE", None)
    r = subprocess.run([sys.executable, "-m", "gobrrr", "calibrate", "--distributed",
                        "--nproc-per-node", "2", "--max-size", "4KiB", "-q"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks, gloo" in r.stdout
    assert "AR busbw" in r.stdout and "RS algbw" in r.stdout
    rows = [line for line in r.stdout.splitlines() if "KiB │" in line]
    assert len(rows) == 3  # 1, 2 and 4 KiB
    assert "all_reduce: best busbw" in r.stdout
