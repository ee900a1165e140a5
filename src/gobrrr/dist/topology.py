"""Which GPUs a distributed job runs on and how they are linked: GPU names, count, the link
between each pair (NVLink or PCIe), NCCL's version and environment, world size and
backend. Measured ceilings are cached per topology (`topology_key`), and reports record it.

The links come from NVML (the `pynvml` module of the `nvidia-ml-py` package) when it
imports, else from `nvidia-smi topo -m`; the parser takes text, so it is tested on saved
output. On a machine without GPUs the topology says CPU and gloo.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from gobrrr.hardware import fingerprint

__all__ = ["topology", "parse_topo_matrix", "link_summary", "nccl_env", "topology_key",
           "visible_gpu_indices"]

# nvidia-smi topo -m's legend: NV# = "a bonded set of # NVLinks"; the rest are PCIe paths
# of increasing length (PIX: one PCIe bridge ... SYS: across the CPUs' SMP interconnect).
_PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NV = re.compile(r"^NV(\d+)$")


def _link_of(code: str) -> dict[str, Any]:
    """One cell of the matrix as {"code", "type", "nvlinks"}: type "NVLink" (nvlinks = the
    count of bonded links), "PCIe", or "unknown" for a code this parser does not know."""
    m = _NV.match(code)
    if m:
        return {"code": code, "type": "NVLink", "nvlinks": int(m.group(1))}
    if code in _PCIE_CODES:
        return {"code": code, "type": "PCIe", "nvlinks": 0}
    return {"code": code, "type": "unknown", "nvlinks": 0}


def parse_topo_matrix(text: str) -> dict[str, Any]:
    """The GPU-to-GPU part of `nvidia-smi topo -m`'s output.

    Returns {"gpus": ["GPU0", ...], "links": {"0-1": {"code": "NV18", "type": "NVLink",
    "nvlinks": 18}, ...}} with one entry per unordered pair of GPUs (i < j). NIC rows and
    columns, the CPU/NUMA affinity columns and the legend are skipped. Raises ValueError
    when the text holds no GPU matrix.
    """
    # nvidia-smi bolds the header with ANSI escapes on a terminal.
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines()]
    header_cols: list[str] | None = None
    rows: dict[str, list[str]] = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if header_cols is None:
            if tokens[0].startswith("GPU") and line[:1].isspace():
                # The header: device columns first, then "CPU Affinity" and the rest.
                cols = []
                for tok in tokens:
                    if not re.match(r"^(GPU|NIC)\d+$", tok):
                        break
                    cols.append(tok)
                header_cols = cols
            continue
        if re.match(r"^GPU\d+$", tokens[0]):
            rows[tokens[0]] = tokens[1:1 + len(header_cols)]
        elif tokens[0].startswith("Legend"):
            break
    if not header_cols or not rows:
        raise ValueError("no GPU matrix found in the nvidia-smi topo -m text")
    gpus = [c for c in header_cols if c.startswith("GPU")]
    links: dict[str, dict[str, Any]] = {}
    for i, a in enumerate(gpus):
        if a not in rows:
            raise ValueError(f"nvidia-smi topo -m text has a {a} column but no {a} row")
        cells = rows[a]
        for b in gpus[i + 1:]:
            j = header_cols.index(b)
            if j >= len(cells):
                raise ValueError(f"nvidia-smi topo -m row {a} has no {b} cell")
            links[f"{int(a[3:])}-{int(b[3:])}"] = _link_of(cells[j])
    return {"gpus": gpus, "links": links}


def link_summary(links: Mapping[str, Mapping[str, Any]],
                 indices: list[int] | None = None) -> str:
    """One word for the links among the GPUs `indices` (default: all): "NVLink" when every
    pair has NVLink, "PCIe" when none has, "mixed" otherwise, "none" for fewer than two
    GPUs."""
    chosen = [v for k, v in links.items()
              if indices is None or all(int(x) in indices for x in k.split("-"))]
    if not chosen:
        return "none"
    types = {v["type"] for v in chosen}
    return types.pop() if len(types) == 1 else "mixed"


def nccl_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every NCCL_* variable: they change NCCL's algorithms, protocols and transports, so
    a ceiling measured under one setting does not hold under another."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith("NCCL_")}


def visible_gpu_indices(n_gpus: int, environ: Mapping[str, str] | None = None) -> list[int]:
    """Host GPU indices this process may use: CUDA_VISIBLE_DEVICES when it lists integer
    indices (UUIDs and MIG names are not mapped: all GPUs then), else all `n_gpus`."""
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(n_gpus))
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if parts and all(p.isdigit() for p in parts):
        return [int(p) for p in parts if int(p) < n_gpus]
    return list(range(n_gpus)) if parts else []


def _nvml_links() -> dict[str, Any] | None:
    """GPU names and pairwise links from NVML, or None when pynvml is missing or fails.

    A pair's NVLink count is the number of active links of GPU i whose remote end is GPU
    j's PCI bus id (nvmlDeviceGetNvLinkRemotePciInfo). On an NVSwitch system (HGX H100/H200)
    every link's remote end is a switch, not a GPU: two GPUs that both have active switch
    links reach each other over NVLink at the smaller of their link counts (what
    `nvidia-smi topo -m` prints as NV18 on two H200s; seen on the device machine, where
    counting direct links alone said PCIe). Other pairs are PCIe.
    """
    try:
        import pynvml  # nvidia-ml-py; optional, never a dependency
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        n = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        names = [_text(pynvml.nvmlDeviceGetName(h)) for h in handles]
        bus_ids = [_text(pynvml.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
        max_links = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
        counts: dict[tuple[int, int], int] = {}
        to_switch = [0] * n  # active links whose remote end is no GPU: an NVSwitch
        for i, h in enumerate(handles):
            for link in range(max_links):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                    remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
                except Exception:  # NVML_ERROR_NOT_SUPPORTED / INVALID_ARGUMENT: no link
                    continue
                if remote.lower() in bus_ids:
                    j = bus_ids.index(remote.lower())
                    counts[(i, j)] = counts.get((i, j), 0) + 1
                else:
                    to_switch[i] += 1
        links = {}
        for i in range(n):
            for j in range(i + 1, n):
                k = counts.get((i, j), 0) or min(to_switch[i], to_switch[j])
                links[f"{i}-{j}"] = ({"code": f"NV{k}", "type": "NVLink", "nvlinks": k} if k
                                     else {"code": "PCIe", "type": "PCIe", "nvlinks": 0})
        return {"gpus": names, "links": links}
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _smi_links(timeout_s: float = 20.0) -> tuple[dict[str, Any] | None, str | None]:
    """(parsed `nvidia-smi topo -m`, None) or (None, why not)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi not found"
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True,
                             timeout=timeout_s, check=True).stdout
        return parse_topo_matrix(out), None
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return None, f"nvidia-smi topo -m failed ({type(exc).__name__}: {exc})"


def _world() -> tuple[int, str | None]:
    """(world size, backend) of the default process group when it exists, else what
    torchrun's environment says (backend None: not chosen yet)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), str(dist.get_backend())
    return int(os.environ.get("WORLD_SIZE", "1")), None


def topology() -> dict[str, Any]:
    """The topology this process sees, as a JSON-ready dict:

    device ("cuda" | "cpu"), gpu_names (the GPUs this process may use, host order),
    gpu_count, link_type ("NVLink" | "PCIe" | "mixed" | "none" | "unknown"), nvlinks
    (bonded NVLinks between the first two GPUs, 0 without), links (pair "i-j" ->
    {code, type, nvlinks}, host indices), link_source ("nvml" | "nvidia-smi" | None),
    nccl_version ("2.27.3"; None on a CPU build), nccl_env, world_size, local_world_size,
    backend (the process group's, or "nccl"/"gloo" as gobrrr would choose), notes.
    """
    import torch

    world_size, backend = _world()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    notes: list[str] = []
    nccl_version = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            nccl_version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception as exc:  # a CUDA build without NCCL
            notes.append(f"NCCL version unknown ({type(exc).__name__})")
    if not torch.cuda.is_available():
        import platform


        return {
            "device": "cpu", "gpu_names": [], "gpu_count": 0,
            "cpu_name": fingerprint("cpu")["name"],
            "machine": platform.machine(), "link_type": "none", "nvlinks": 0, "links": {},
            "link_source": None, "nccl_version": None, "nccl_env": nccl_env(),
            "world_size": world_size, "local_world_size": local_world,
            "backend": backend or "gloo", "notes": notes,
        }
    parsed = _nvml_links()
    source: str | None = "nvml"
    if parsed is None:
        parsed, why = _smi_links()
        source = "nvidia-smi" if parsed is not None else None
        if why:
            notes.append(f"links unknown: {why}")
    n_visible = torch.cuda.device_count()
    names = [torch.cuda.get_device_name(i) for i in range(n_visible)]
    if parsed is not None:
        indices = visible_gpu_indices(len(parsed["gpus"]))[:max(n_visible, 1)]
        links = {k: v for k, v in parsed["links"].items()
                 if all(int(x) in indices for x in k.split("-"))}
        link_type = link_summary(links)
    else:
        links, link_type = {}, "unknown" if n_visible > 1 else "none"
    first = next(iter(links.values()), None)
    return {
        "device": "cuda", "gpu_names": names, "gpu_count": n_visible,
        "link_type": link_type, "nvlinks": first["nvlinks"] if first else 0,
        "links": links, "link_source": source, "nccl_version": nccl_version,
        "nccl_env": nccl_env(), "world_size": world_size, "local_world_size": local_world,
        "backend": backend or "nccl", "notes": notes,
    }


def topology_key(topo: Mapping[str, Any]) -> dict[str, Any]:
    """What a communication ceiling depends on, for the cache: the GPU names and count
    (the CPU's name on CPU), the link type and NVLink count, the NCCL version and
    environment, the backend and the world size."""
    return {
        "device": topo["device"],
        "gpu_names": list(topo["gpu_names"]) or [topo.get("cpu_name", "cpu")],
        "gpu_count": topo["gpu_count"],
        "link_type": topo["link_type"],
        "nvlinks": topo["nvlinks"],
        "nccl_version": topo["nccl_version"],
        "nccl_env": dict(topo["nccl_env"]),
        "backend": topo["backend"],
        "world_size": topo["world_size"],
    }
