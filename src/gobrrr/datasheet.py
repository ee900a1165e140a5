"""Vendor datasheet peaks for known GPUs: shown beside the measured ceilings (as % of
datasheet) and used as a fallback when calibration cannot run.

All FLOP/s are dense (no 2:4 sparsity), counting an FMA as 2 FLOPs; bandwidth is the
DRAM figure in bytes/s. "fp32" is the non-tensor-core CUDA-core rate. Where a datasheet
only quotes sparse tensor rates, the dense figure is half of it (stated per entry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DatasheetEntry", "DATASHEET", "lookup", "InterconnectEntry", "INTERCONNECTS",
           "lookup_interconnect", "INTER_NODE_DEFAULT"]

T = 1e12


@dataclass(frozen=True)
class DatasheetEntry:
    name: str
    pattern: str  # regex matched against torch.cuda.get_device_name()
    peak_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float
    source: str


DATASHEET: tuple[DatasheetEntry, ...] = (
    # Order matters: more specific patterns first (e.g. H100 PCIe before H100).
    DatasheetEntry(
        "H200 SXM", r"H200",
        {"bf16": 989 * T, "fp16": 989 * T, "tf32": 494 * T, "fp32": 67 * T}, 4.8e12,
        "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column, dense = sparse/2",
    ),
    DatasheetEntry(
        "H100 PCIe", r"H100.*PCIe",
        {"bf16": 756 * T, "fp16": 756 * T, "tf32": 378 * T, "fp32": 51 * T}, 2.0e12,
        "NVIDIA H100 Tensor Core GPU datasheet (2023), PCIe column, dense = sparse/2",
    ),
    DatasheetEntry(
        "H100 SXM", r"H100",
        {"bf16": 989 * T, "fp16": 989 * T, "tf32": 494 * T, "fp32": 67 * T}, 3.35e12,
        "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column, dense = sparse/2",
    ),
    DatasheetEntry(
        "A100 80GB", r"A100.*80GB",
        {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T}, 2.039e12,
        "NVIDIA A100 Tensor Core GPU datasheet (2021), 80GB SXM column",
    ),
    DatasheetEntry(
        "A100 40GB", r"A100",
        {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T}, 1.555e12,
        "NVIDIA A100 Tensor Core GPU datasheet (2021), 40GB column",
    ),
    DatasheetEntry(
        "A10", r"\bA10\b",
        {"bf16": 125 * T, "fp16": 125 * T, "tf32": 62.5 * T, "fp32": 31.2 * T}, 600e9,
        "NVIDIA A10 Tensor Core GPU datasheet (2021), dense = sparse/2",
    ),
    DatasheetEntry(
        "L4", r"\bL4\b",
        {"bf16": 121 * T, "fp16": 121 * T, "tf32": 60 * T, "fp32": 30.3 * T}, 300e9,
        "NVIDIA L4 Tensor Core GPU datasheet (2023), dense = sparse/2",
    ),
    DatasheetEntry(
        "V100", r"V100",
        {"fp16": 125 * T, "fp32": 15.7 * T}, 900e9,
        "NVIDIA Tesla V100 datasheet (2020), SXM2 column (no bf16/tf32 on Volta)",
    ),
    DatasheetEntry(
        "T4", r"\bT4\b",
        {"fp16": 65 * T, "fp32": 8.1 * T}, 320e9,
        "NVIDIA T4 Tensor Core GPU datasheet (2019) (no bf16/tf32 on Turing)",
    ),
    DatasheetEntry(
        "RTX 4090", r"RTX 4090",
        {"bf16": 165.2 * T, "fp16": 165.2 * T, "tf32": 82.6 * T, "fp32": 82.6 * T}, 1.008e12,
        "NVIDIA Ada Lovelace architecture whitepaper v1.03, appendix table 2, "
        "fp16/bf16 with fp32 accumulate, dense",
    ),
    DatasheetEntry(
        "RTX 3090", r"RTX 3090",
        {"bf16": 71 * T, "fp16": 71 * T, "tf32": 35.6 * T, "fp32": 35.6 * T}, 936e9,
        "NVIDIA Ampere GA102 GPU architecture whitepaper v2.1, table 9, "
        "fp16/bf16 with fp32 accumulate, dense",
    ),
)


def lookup(device_name: str) -> DatasheetEntry | None:
    """The datasheet entry for a CUDA device name, or None for unknown devices."""
    for entry in DATASHEET:
        if re.search(entry.pattern, device_name):
            return entry
    return None


# ---------------------------------------------------------------- interconnects
#
# Link peaks between GPUs, shown beside the measured communication ceilings
# (dist/ceilings.py). Datasheets quote NVLink as the total of both directions; nccl-tests'
# bus bandwidth is "a unidirectional bandwidth" (nccl-tests doc/PERFORMANCE.md), so busbw
# compares to `bytes_per_s_per_direction`, half the datasheet figure. NCCL's NVLS
# all-reduce (reduction inside the NVSwitch) can report a busbw above it: the 2(n-1)/n
# factor assumes the GPUs do the reduction (PERFORMANCE.md gives (n-1)/(n+1) for
# in-network reduction).


@dataclass(frozen=True)
class InterconnectEntry:
    name: str
    gpu_pattern: str  # regex matched against the GPU name
    link_type: str  # "NVLink" | "PCIe", as dist.topology reports it
    bytes_per_s_bidirectional: float
    bytes_per_s_per_direction: float
    source: str


INTERCONNECTS: tuple[InterconnectEntry, ...] = (
    # Order matters: H100 PCIe (no NVLink-to-NVSwitch) before the SXM H100 pattern.
    InterconnectEntry(
        "H200 SXM NVLink 4 (18 links)", r"H200", "NVLink", 900e9, 450e9,
        "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column: NVIDIA NVLink 900GB/s "
        "(both directions; 18 NVLink 4 links of 50 GB/s)",
    ),
    InterconnectEntry(
        "H100 SXM NVLink 4 (18 links)", r"H100(?!.*PCIe)", "NVLink", 900e9, 450e9,
        "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column: NVLink 900GB/s "
        "(both directions)",
    ),
    InterconnectEntry(
        "A100 SXM NVLink 3 (12 links)", r"A100", "NVLink", 600e9, 300e9,
        "NVIDIA A100 Tensor Core GPU datasheet (2021), SXM column: NVLink 600GB/s "
        "(both directions)",
    ),
    InterconnectEntry(
        "PCIe 5.0 x16", r"H100|H200", "PCIe", 128e9, 64e9,
        "NVIDIA H100/H200 datasheets: PCIe Gen5 128GB/s (both directions)",
    ),
    InterconnectEntry(
        "PCIe 4.0 x16", r"A100|A10\b|L4\b|RTX 4090|RTX 3090", "PCIe", 64e9, 32e9,
        "NVIDIA A100/A10/L4 datasheets: PCIe Gen4 64GB/s (both directions)",
    ),
)


def lookup_interconnect(gpu_name: str, link_type: str) -> InterconnectEntry | None:
    """The datasheet peak of the link between two GPUs of this name, or None."""
    for entry in INTERCONNECTS:
        if entry.link_type == link_type and re.search(entry.gpu_pattern, gpu_name):
            return entry
    return None


# Between nodes, the projection's default (dist/projection.py): a DGX H100/H200 node has
# 8 single-port ConnectX-7 adapters of 400 Gb/s InfiniBand NDR for the compute fabric, one
# per GPU: 8 x 400 Gb/s = 3.2 Tb/s = 400 GB/s per node and direction (NVIDIA DGX H100 and
# DGX H200 datasheets, "Networking: 8x single-port NVIDIA ConnectX-7 VPI, 400Gb/s
# InfiniBand/Ethernet"). A link rate: what NCCL achieves across nodes is lower.
INTER_NODE_DEFAULT = InterconnectEntry(
    "8x InfiniBand NDR 400 Gb/s per node (DGX H100/H200)", r".", "InfiniBand",
    800e9, 400e9,
    "NVIDIA DGX H100 / DGX H200 datasheets: 8x single-port ConnectX-7 VPI, 400Gb/s "
    "InfiniBand/Ethernet, one per GPU",
)
