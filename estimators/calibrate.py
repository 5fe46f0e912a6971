"""Fit the estimators' run-time constants from the measured tables in ``../shared/data``.

    python -m estimators.calibrate [--data ../shared/data] --out DIR

writes into ``DIR`` (never into the package) ``calibration.json`` (kernel and network models),
``lengths.json`` (response-length quantile tables) and ``tool_latency.json`` (measured tool-call
latencies), each only when its inputs are in ``--data`` (a partial folder gives a partial
calibration; the message names what was skipped). A scenario selects the folder with
``calibration: DIR`` (or ``RL_PLANNER_CALIBRATION=DIR``); the estimators then read it over the
shipped tables (:mod:`estimators.datadir`). The shipped files in ``estimators/data`` were made by
this command; they let the planner run where ``../shared/data`` does not exist; their licenses are
in ``estimators/data/LICENSES.md``. Sources:

* kernels: aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0), vLLM 0.24.0 bf16 GEMM, decode and
  prefill attention latencies measured on H100 SXM and H200 SXM;
* network: microsoft/vidur @ 7d47513 (MIT), ``data/profiling/network/h100_dgx``: NCCL all-reduce
  and send/recv times on an H100 DGX, intra- and inter-node;
* response lengths: alibaba/ServeGen @ f891d11 (Apache-2.0), DeepSeek-R1 production serving;
* tool latency: Farrrrland/RollPacker @ bb8afa9 (Apache-2.0), ``data/time_list.json``.

Models fitted (times in ms, F = peak dense bf16 FLOP/s, B = HBM bytes/s of the GPU):

* GEMM m x n x k: ``c0 + ((2mnk / (F e_c))^p + (2(mk + kn + mn) / (B e_m))^p)^(1/p)``, a smoothed
  roofline; least squares on log time over shapes with n, k >= 256.
* decode attention per layer: ``c0 + a * KVbytes / B + b * batch * q_heads``, non-negative least
  squares weighted by 1/t (relative error), KVbytes = batch x kv_len x kv_heads x head_dim x 4.
* prefill attention per layer: ``c0 + a * causal_FLOPs / F + b * QKVbytes / B``, same fit.
* NCCL collectives and send/recv: ``latency + bytes / bandwidth`` per worker count, NNLS.
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import json
import math
import sys
from pathlib import Path

import numpy as np

from estimators import gpus

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
AIC = "aiconfigurator/aiconfigurator_core/systems/data"
MEASURED = {"H100": "h100_sxm", "H200": "h200_sxm"}


def _rows(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as fh:
        yield from csv.DictReader(fh)


def load_gemm(data: Path, gpu: str):
    path = data / AIC / MEASURED[gpu] / "gemm/vllm/0.24.0/gemm_perf.csv.gz"
    rows = [r for r in _rows(path) if r["gemm_dtype"] == "bfloat16"]
    m = np.array([float(r["m"]) for r in rows])
    n = np.array([float(r["n"]) for r in rows])
    k = np.array([float(r["k"]) for r in rows])
    t = np.array([float(r["latency"]) for r in rows])
    return m, n, k, t


def load_decode_attention(data: Path, gpu: str):
    path = data / AIC / MEASURED[gpu] / "attention/vllm/0.24.0/generation_attention_perf.csv.gz"
    rows = [r for r in _rows(path) if r["kv_cache_dtype"] == "bfloat16" and r["window_size"] == "0"
            and r["kernel_source"] == "vllm_flash_attn_fa3"]
    cols = {c: np.array([float(r[c]) for r in rows]) for c in
            ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "step", "latency")}
    return cols


def load_prefill_attention(data: Path, gpu: str):
    path = data / AIC / MEASURED[gpu] / "attention/vllm/0.24.0/context_attention_perf.csv.gz"
    rows = [r for r in _rows(path) if r["kv_cache_dtype"] == "bfloat16" and r["window_size"] == "0"
            and r["kernel_source"] == "vllm_flash_attn_fa3"]
    cols = {c: np.array([float(r[c]) for r in rows]) for c in
            ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "isl", "latency")}
    return cols


def gemm_model(m, n, k, F, B, c0, ec, em, p):
    tc = 2.0 * m * n * k / (F * ec) * 1e3
    tm = 2.0 * (m * k + k * n + m * n) / (B * em) * 1e3
    return c0 + (tc ** p + tm ** p) ** (1.0 / p)


def fit_gemm(data: Path, gpu: str) -> dict:
    from scipy.optimize import least_squares

    spec = gpus.CATALOGUE[gpu]
    F, B = spec.bf16_tflops * 1e12, spec.hbm_bw_tb_per_s * 1e12
    m, n, k, t = load_gemm(data, gpu)
    sel = (n >= 256) & (k >= 256)
    m, n, k, t = m[sel], n[sel], k[sel], t[sel]

    def resid(x):
        c0, ec, em, p = x
        return np.log(gemm_model(m, n, k, F, B, c0, ec, em, p) / t)

    res = least_squares(resid, x0=[0.005, 0.7, 0.8, 2.0], bounds=([0.0, 0.05, 0.05, 1.0], [0.1, 1.0, 1.0, 8.0]))
    c0, ec, em, p = (float(v) for v in res.x)
    err = np.abs(resid(res.x))
    return {"c0_ms": c0, "eff_compute": ec, "eff_memory": em, "p": p,
            "fit_median_abs_log_err": float(np.median(err)), "fit_rows": int(len(t))}


def decode_attention_features(batch, q_heads, kv_heads, head_dim, kv_len, B):
    kv_bytes = batch * kv_len * kv_heads * head_dim * 4.0  # K and V, bf16
    return np.stack([np.ones_like(batch), kv_bytes / B * 1e3, batch * q_heads * 1e-3], axis=-1)


def prefill_attention_features(batch, q_heads, kv_heads, head_dim, isl, F, B):
    flops = 2.0 * 2.0 * batch * q_heads * head_dim * isl * isl / 2.0  # QK^T and AV, causal half
    qkv_bytes = batch * isl * (q_heads + 2 * kv_heads) * head_dim * 2.0
    return np.stack([np.ones_like(batch), flops / F * 1e3, qkv_bytes / B * 1e3], axis=-1)


def _nnls_rel(X, t) -> np.ndarray:
    from scipy.optimize import nnls

    w = 1.0 / t
    coef, _ = nnls(X * w[:, None], t * w)
    return coef


def fit_decode_attention(data: Path, gpu: str) -> dict:
    spec = gpus.CATALOGUE[gpu]
    B = spec.hbm_bw_tb_per_s * 1e12
    c = load_decode_attention(data, gpu)
    kv_len = c["step"] + 1
    X = decode_attention_features(c["batch_size"], c["num_heads"], c["num_key_value_heads"], c["head_dim"], kv_len, B)
    coef = _nnls_rel(X, c["latency"])
    err = np.abs(np.log(X @ coef / c["latency"]))
    return {"c0_ms": float(coef[0]), "kv_coef": float(coef[1]), "bh_coef": float(coef[2]),
            "fit_median_abs_log_err": float(np.median(err)), "fit_rows": int(len(err))}


def fit_prefill_attention(data: Path, gpu: str) -> dict:
    spec = gpus.CATALOGUE[gpu]
    F, B = spec.bf16_tflops * 1e12, spec.hbm_bw_tb_per_s * 1e12
    c = load_prefill_attention(data, gpu)
    X = prefill_attention_features(c["batch_size"], c["num_heads"], c["num_key_value_heads"], c["head_dim"], c["isl"], F, B)
    coef = _nnls_rel(X, c["latency"])
    err = np.abs(np.log(X @ coef / c["latency"]))
    return {"c0_ms": float(coef[0]), "flops_coef": float(coef[1]), "bytes_coef": float(coef[2]),
            "fit_median_abs_log_err": float(np.median(err)), "fit_rows": int(len(err))}


def _fit_latency_bw(sizes: np.ndarray, t_ms: np.ndarray) -> dict:
    X = np.stack([np.ones_like(sizes), sizes], axis=1)
    coef = _nnls_rel(X, t_ms)
    bw = 1.0 / coef[1] * 1e3 / 1e9 if coef[1] > 0 else float("inf")  # bytes per ms -> GB/s
    err = np.abs(np.log(X @ coef / t_ms))
    return {"latency_ms": float(coef[0]), "bandwidth_gb_per_s": float(bw), "fit_median_abs_log_err": float(np.median(err))}


def fit_network(data: Path) -> dict:
    out: dict = {"all_reduce_intra_node": {}, "send_recv": {}}
    base = data / "vidur-network/h100_dgx"
    rows = list(_rows(base / "all_reduce.csv"))
    for nw in sorted({r["num_workers"] for r in rows}, key=int):
        sel = [r for r in rows if r["num_workers"] == nw]
        s = np.array([float(r["size"]) for r in sel])
        t = np.array([float(r["time_stats.all_reduce.median"]) for r in sel])
        out["all_reduce_intra_node"][nw] = _fit_latency_bw(s, t)
    rows = list(_rows(base / "send_recv.csv"))
    for dpn, name in (("2", "intra_node"), ("1", "inter_node")):
        sel = [r for r in rows if r["devices_per_node"] == dpn]
        s = np.array([float(r["size"]) for r in sel])
        t = np.array([float(r["time_stats.send_recv.median"]) for r in sel])
        out["send_recv"][name] = _fit_latency_bw(s, t)
    return out


def _quantiles_from_pmf(pmf: dict[float, float], qs: np.ndarray) -> np.ndarray:
    vals = np.array(sorted(pmf))
    probs = np.array([pmf[v] for v in vals], dtype=float)
    cdf = np.cumsum(probs) / probs.sum()
    idx = np.searchsorted(cdf, qs, side="left").clip(0, len(vals) - 1)
    return vals[idx]


def fit_lengths(data: Path, n_mix: int = 1001, n_client: int = 201) -> dict:
    """Rate-weighted output/input length mixtures of the ServeGen DeepSeek-R1 clients."""
    folder = data / "servegen-deepseek-r1"
    mix_out: dict[float, float] = {}
    mix_in: dict[float, float] = {}
    clients = {}
    for ds in sorted(folder.glob("chunk-*-dataset.json"), key=lambda p: int(p.stem.split("-")[1])):
        cid = ds.stem.split("-")[1]
        windows = json.loads(ds.read_text())
        trace = folder / f"chunk-{cid}-trace.csv"
        rate_by_window: dict[int, float] = {}
        with open(trace, newline="") as fh:
            for row in csv.reader(fh):
                start, rate = float(row[0]), float(row[1] or 0.0)
                w = int(start // 21600) * 21600
                rate_by_window[w] = rate_by_window.get(w, 0.0) + rate * 600.0
        c_out: dict[float, float] = {}
        total = 0.0
        for wkey, w in windows.items():
            weight = rate_by_window.get(int(float(wkey)), 0.0)
            if weight <= 0:
                continue
            out_pmf = ast.literal_eval(w["output_tokens"])
            in_pmf = ast.literal_eval(w["input_tokens"])
            for v, p in out_pmf.items():
                mix_out[v] = mix_out.get(v, 0.0) + p * weight
                c_out[v] = c_out.get(v, 0.0) + p * weight
            for v, p in in_pmf.items():
                mix_in[v] = mix_in.get(v, 0.0) + p * weight
            total += weight
        if total > 0 and c_out:
            q = np.linspace(0, 1, n_client)
            clients[cid] = {"requests": total, "output_quantiles": _quantiles_from_pmf(c_out, q).astype(int).tolist()}
    q = np.linspace(0, 1, n_mix)
    return {
        "source": "alibaba/ServeGen @ f891d11 data/reason/deepseek-r1 (Apache-2.0), rate-weighted over 6 h windows",
        "mixture": {
            "output_quantiles": _quantiles_from_pmf(mix_out, q).astype(int).tolist(),
            "input_quantiles": _quantiles_from_pmf(mix_in, q).astype(int).tolist(),
        },
        "clients": clients,
    }


def fit_tool_latency(data: Path) -> dict:
    path = data / "rollpacker-tool-latency/time_list.json"
    d = json.loads(path.read_text())
    if not isinstance(d, dict) or not all(isinstance(lst, list) for lst in d.values()):
        got = ("a list" if isinstance(d, list) else "an object whose values are not all lists" if isinstance(d, dict)
               else type(d).__name__)
        raise ValueError(f"{path}: expected an object of lists of seconds, {{\"<tool>\": [0.8, 1.2, ...], ...}} (RollPacker's "
                         f"layout), got {got}")
    vals = sorted(round(float(v), 5) for lst in d.values() for v in lst)
    return {"source": "Farrrrland/RollPacker @ bb8afa9 data/time_list.json (Apache-2.0)", "seconds": vals}


def kernel_inputs(data: Path, gpu: str) -> list[Path]:
    base = data / AIC / MEASURED[gpu]
    return [base / "gemm/vllm/0.24.0/gemm_perf.csv.gz",
            base / "attention/vllm/0.24.0/generation_attention_perf.csv.gz",
            base / "attention/vllm/0.24.0/context_attention_perf.csv.gz"]


def part_inputs(data: Path) -> dict[str, list[Path]]:
    """The input files of each part of the calibration (a part runs only when all of its exist)."""
    parts = {f"kernels {gpu}": kernel_inputs(data, gpu) for gpu in MEASURED}
    parts["network"] = [data / "vidur-network/h100_dgx/all_reduce.csv", data / "vidur-network/h100_dgx/send_recv.csv"]
    parts["lengths"] = [data / "servegen-deepseek-r1"]
    parts["tool latency"] = [data / "rollpacker-tool-latency/time_list.json"]
    return parts


def calibrate(data: Path, gpus_: tuple[str, ...] | None = None, network: bool = True) -> dict:
    """``calibration.json``'s content: kernel fits for ``gpus_`` (default: every measured type) and,
    with ``network``, the NCCL fits."""
    kernels = {}
    for gpu in (MEASURED if gpus_ is None else gpus_):
        kernels[gpu] = {
            "gemm": fit_gemm(data, gpu),
            "decode_attention": fit_decode_attention(data, gpu),
            "prefill_attention": fit_prefill_attention(data, gpu),
        }
    out: dict = {"kernels": kernels, "sources": {}}
    if kernels:
        out["sources"]["kernels"] = ("aiconfigurator-core 0.12.0 systems/data/{" + ",".join(MEASURED[g] for g in kernels)
                                     + "} vLLM 0.24.0 bf16 (NVIDIA, Apache-2.0)")
    if network:
        out["network"] = fit_network(data)
        out["sources"]["network"] = "microsoft/vidur @ 7d47513 data/profiling/network/h100_dgx (MIT)"
    return out


def _round(obj, digits: int = 6):
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else obj
    if isinstance(obj, dict):
        return {k: _round(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v, digits) for v in obj]
    return obj


class CalibrationError(Exception):
    """Bad input data: the message names the part and the file."""


def _inside_package(path: Path) -> bool:
    pkg = Path(__file__).resolve().parent
    p = path.resolve()
    return p == pkg or pkg in p.parents


def run(data: Path, out: Path) -> tuple[list[str], list[str]]:
    """Fit every part whose inputs exist under ``data`` and write the results into ``out``.

    Returns (files written, parts skipped with the reason). Raises :class:`CalibrationError` when
    no part has its inputs or an input cannot be parsed; nothing is written then."""
    inputs = part_inputs(data)
    present = {k: v for k, v in inputs.items() if all(p.exists() for p in v)}
    skipped = [f"{k} (no {next(p for p in v if not p.exists()).relative_to(data)})" for k, v in inputs.items() if k not in present]
    if not present:
        raise CalibrationError(f"nothing to calibrate in {data}: none of the parts has its inputs ({'; '.join(skipped)})")
    docs: dict[str, str] = {}
    part = ""
    try:
        gpus_ = tuple(g for g in MEASURED if f"kernels {g}" in present)
        if gpus_ or "network" in present:
            part = "kernels/network"
            docs["calibration.json"] = json.dumps(_round(calibrate(data, gpus_, "network" in present)), indent=1, sort_keys=True) + "\n"
        if "lengths" in present:
            part = "lengths"
            lengths = fit_lengths(data)
            if not lengths["clients"]:
                raise ValueError("no ServeGen client files (chunk-<id>-dataset.json with chunk-<id>-trace.csv)")
            docs["lengths.json"] = json.dumps(_round(lengths), sort_keys=True) + "\n"
        if "tool latency" in present:
            part = "tool latency"
            docs["tool_latency.json"] = json.dumps(fit_tool_latency(data)) + "\n"
    except (KeyError, ValueError, TypeError, IndexError, SyntaxError, OSError, EOFError, csv.Error) as exc:
        raise CalibrationError(f"cannot calibrate {part} from {data}: {type(exc).__name__}: {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        tmp = out / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(out / name)
    return sorted(docs), skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of measured tables (default ../shared/data)")
    ap.add_argument("--out", type=Path, help="folder to write the calibration into (required; never the package's own "
                    "estimators/data). Select it with the scenario field 'calibration: DIR' or RL_PLANNER_CALIBRATION=DIR")
    args = ap.parse_args(argv)
    if args.out is None:
        print("error: --out DIR is required (the shipped tables in estimators/data are never overwritten); "
              "then select the folder with 'calibration: DIR' in a scenario or RL_PLANNER_CALIBRATION=DIR", file=sys.stderr)
        return 2
    if _inside_package(args.out):
        print(f"error: --out {args.out} lies inside the installed estimators package; pass a folder of your own",
              file=sys.stderr)
        return 2
    if not args.data.is_dir():
        print(f"error: data folder {args.data} not found; pass --data PATH", file=sys.stderr)
        return 2
    try:
        written, skipped = run(args.data, args.out)
    except CalibrationError as exc:
        print(f"error: {exc}. Fix: point --data at a folder laid out like ../shared/data "
              "(see estimators/calibrate.py's docstring for the files each part reads)", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(str(args.out / w) for w in written)}")
    if skipped:
        print("skipped (its inputs are missing; the estimators keep the shipped tables for it when this folder is selected): "
              + "; ".join(skipped))
    print(f"use it: 'calibration: {args.out}' in a scenario, or RL_PLANNER_CALIBRATION={args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
