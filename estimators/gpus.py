"""GPU catalogue.

Figures are public spec-sheet values as collected in ``../shared/data/README.md``:

=========  =================  ======  ==============  =========================
GPU        dense BF16 TFLOP/s HBM GB  HBM TB/s        NVLink GB/s (bidirectional)
=========  =================  ======  ==============  =========================
H100 SXM   989                80      3.35            900
H800 SXM   989                80      3.35            400
H200 SXM   989                141     4.8             900
H20        148                96      4.0             900
=========  =================  ======  ==============  =========================

Inter-node bandwidth per GPU (one 400 Gb/s NDR NIC per GPU = 50 GB/s per direction) is the
aiconfigurator ``h100_sxm.yaml`` figure (``inter_node_bw: 50000000000``), used for all four.
Host link (PCIe 5.0 x16, 64 GB/s per direction) is the same file's ``pcie_bw``.

Prices are *not* part of the catalogue: they are scenario inputs (``gpu_types.<T>.price_per_gpu_hour``).
``measured_as`` names the aiconfigurator kernel table a type is calibrated on; H800 and H20 have
no measured tables, so their kernel times are derived from the H100's by the ratio of memory
bandwidth (memory-bound kernels: decode) and of FLOP/s (compute-bound kernels: prefill, training),
see :mod:`estimators.kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping


@dataclass(frozen=True)
class GPUSpec:
    name: str
    bf16_tflops: float
    hbm_gb: float
    hbm_bw_tb_per_s: float
    nvlink_gb_per_s: float  # bidirectional, as quoted on spec sheets
    inter_node_bw_gb_per_s: float = 50.0  # per GPU, one direction
    pcie_gb_per_s: float = 64.0  # host <-> GPU, one direction
    measured_as: str = "H100"  # which measured kernel table it derives from
    price_per_gpu_hour: float | None = None  # scenario input only

    @property
    def nvlink_uni_gb_per_s(self) -> float:
        """One-direction NVLink bandwidth per GPU (half the bidirectional spec figure)."""
        return self.nvlink_gb_per_s / 2.0


CATALOGUE: dict[str, GPUSpec] = {
    "H100": GPUSpec("H100", 989.0, 80.0, 3.35, 900.0, measured_as="H100"),
    "H800": GPUSpec("H800", 989.0, 80.0, 3.35, 400.0, measured_as="H100"),
    "H200": GPUSpec("H200", 989.0, 141.0, 4.8, 900.0, measured_as="H200"),
    "H20": GPUSpec("H20", 148.0, 96.0, 4.0, 900.0, measured_as="H100"),
}

ALIASES = {"H100-SXM": "H100", "H100_SXM": "H100", "H200-SXM": "H200", "H200_SXM": "H200", "H800-SXM": "H800"}


def canonical_name(name: str) -> str | None:
    key = str(name).strip().upper()
    key = ALIASES.get(key, key)
    return key if key in CATALOGUE else None


def get(name: str, overrides: Mapping[str, float | None] | None = None) -> GPUSpec:
    """The catalogue entry for ``name`` with scenario overrides (figures by field name) applied."""
    canon = canonical_name(name)
    if canon is None:
        raise KeyError(name)
    spec = CATALOGUE[canon]
    if overrides:
        # replace() refuses names that are not fields of GPUSpec; the scenario schema bounds the values
        changes: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        spec = replace(spec, **changes)
    return spec
