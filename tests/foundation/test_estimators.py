"""Estimators: known answers computed by hand, calibration against measured kernels, properties."""

from __future__ import annotations

import csv
import gzip

import numpy as np
import pytest

from estimators import comm, curves, gpus, kernels, lengths, memory, models, rollout, training
from tests.conftest import shared_data

QWEN7B = models.preset("qwen2.5-7b")
QWEN15B = models.preset("qwen2.5-1.5b")
H100 = gpus.get("H100")


# ------------------------------------------------------------------ models and memory (by hand)
def test_param_counts_match_published_sizes():
    # Qwen2.5 model cards: 1.54B, 7.61B, 14.7B, 32.5B (32.8B with the untied head), 72.7B
    assert QWEN15B.num_params == pytest.approx(1.54e9, rel=0.01)
    assert QWEN7B.num_params == pytest.approx(7.61e9, rel=0.01)
    assert models.preset("qwen2.5-72b").num_params == pytest.approx(72.7e9, rel=0.01)
    assert models.preset("llama3.1-8b").num_params == pytest.approx(8.03e9, rel=0.01)


def test_qwen7b_param_count_by_hand():
    h, L, V, ffn = 3584, 28, 152064, 18944
    q, kv = 28 * 128, 4 * 128
    layer = h * q + 2 * h * kv + q * h + (q + 2 * kv) + 3 * h * ffn + 2 * h
    assert QWEN7B.num_params == 2 * V * h + L * layer + h


def test_adam_memory_of_7b_by_hand():
    p = QWEN7B.num_params
    st = memory.training_state(QWEN7B)
    # ZeRO accounting: 2 (bf16 weights) + 2 (bf16 grads) + 4 (fp32 master) + 4 + 4 (Adam m, v) = 16 B/param
    assert st.total_bytes == 16 * p
    assert st.total_bytes / 1e9 == pytest.approx(121.85, abs=0.05)
    # fp32 gradients (Megatron main grads): 18 B/param
    assert memory.training_state(QWEN7B, grad_bytes=4).total_bytes == 18 * p


def test_training_bytes_per_gpu_sharding():
    p = QWEN7B.num_params
    # tp=2, pp=1, dp=4 with the distributed optimizer: 4 B/param over 2 ranks + 12 B/param over 8 ranks
    assert memory.training_bytes_per_gpu(QWEN7B, 2, 1, 4) == pytest.approx(4 * p / 2 + 12 * p / 8)
    assert memory.training_bytes_per_gpu(QWEN7B, 2, 1, 4, distributed_optimizer=False) == pytest.approx(16 * p / 2)


def test_kv_bytes_per_token_by_hand():
    assert memory.kv_bytes_per_token(QWEN7B) == 2 * 28 * 4 * 128 * 2 == 57344
    assert memory.kv_bytes_per_token(QWEN15B) == 2 * 28 * 2 * 128 * 2


def test_kv_capacity_by_hand():
    free = 80e9 * 0.9 - QWEN7B.num_params * 2 - 3.5e9
    assert memory.kv_capacity_tokens(QWEN7B, 80, 1) == pytest.approx(free / 57344)
    # tp=8 > kv_heads=4: KV heads are replicated, one per GPU
    per_gpu = 80e9 * 0.9 - QWEN7B.num_params * 2 / 8 - 3.5e9
    assert memory.kv_capacity_tokens(QWEN7B, 80, 8) == pytest.approx(per_gpu / (2 * 28 * 1 * 128 * 2))


def test_host_dram_residency():
    p = QWEN7B.num_params
    assert memory.host_dram_rollout_node_gb(QWEN7B) == pytest.approx(2 * p / 1e9)
    assert memory.host_dram_train_node_gb(QWEN7B, 2) == pytest.approx(14 * p / 2 / 1e9)


def test_training_time_by_hand():
    tokens, ctx = 1e6, 0.0
    t = training.train_step_s(QWEN7B, H100, 8, tokens, ctx, mfu=0.5)
    flops = 3 * 2 * (28 * (3584 * 3584 * 2 + 2 * 3584 * 512 + 3 * 3584 * 18944) + 152064 * 3584) * tokens
    assert t == pytest.approx(flops / (8 * 989e12 * 0.5))


# ------------------------------------------------------------------------ kernel calibration
def _interp_loglog(grid_x, grid_y, x):
    return float(np.exp(np.interp(np.log(x), np.log(grid_x), np.log(grid_y))))


def _measured_gemm_ms(rows, m, n, k):
    """Measured latency at (m, n, k), bilinear in log n, log k between grid points."""
    ns = sorted({r[1] for r in rows if r[0] == m})
    ks = sorted({r[2] for r in rows if r[0] == m})
    table = {(r[1], r[2]): r[3] for r in rows if r[0] == m}

    def at_n(nv):
        kk = [x for x in ks if (nv, x) in table]  # the grid is not full at the largest sizes
        return _interp_loglog(kk, [table[(nv, x)] for x in kk], k)

    if n > ns[-1]:
        # beyond the grid (the LM head, n = vocab): at m = 64 the GEMM reads its n x k weights,
        # so time is linear in n; extrapolate from the largest measured n
        return at_n(ns[-1]) * n / ns[-1]
    lo = max(v for v in ns if v <= n)
    hi = min(v for v in ns if v >= n)
    if lo == hi:
        return at_n(lo)
    return _interp_loglog([lo, hi], [at_n(lo), at_n(hi)], n)


@pytest.mark.data
def test_decode_step_within_15pct_of_measured_kernels():
    """Qwen2.5-1.5B, batch 64, KV 4K, H100 TP1: model vs the sum of measured kernel latencies."""
    base = shared_data("aiconfigurator", "aiconfigurator_core", "systems", "data", "h100_sxm")
    rows = []
    with gzip.open(base / "gemm/vllm/0.24.0/gemm_perf.csv.gz", "rt") as fh:
        for r in csv.DictReader(fh):
            if r["gemm_dtype"] == "bfloat16" and r["m"] == "64":
                rows.append((64, int(r["n"]), int(r["k"]), float(r["latency"])))
    attn = None
    with gzip.open(base / "attention/vllm/0.24.0/generation_attention_perf.csv.gz", "rt") as fh:
        for r in csv.DictReader(fh):
            if (r["batch_size"], r["num_heads"], r["num_key_value_heads"], r["head_dim"], r["step"], r["kv_cache_dtype"],
                    r["window_size"], r["kernel_source"]) == ("64", "12", "2", "128", "4095", "bfloat16", "0", "vllm_flash_attn_fa3"):
                attn = float(r["latency"])
    assert attn is not None
    m = QWEN15B
    h, ffn = m.hidden_size, m.intermediate_size
    per_layer = (_measured_gemm_ms(rows, 64, m.q_dim + 2 * m.kv_dim, h) + _measured_gemm_ms(rows, 64, h, m.q_dim)
                 + _measured_gemm_ms(rows, 64, 2 * ffn, h) + _measured_gemm_ms(rows, 64, h, ffn) + attn)
    measured = m.num_layers * per_layer + _measured_gemm_ms(rows, 64, m.vocab_size, h)
    predicted = rollout.decode_step_ms(m, H100, 1, 64, 4096)
    assert predicted == pytest.approx(measured, rel=0.15), (predicted, measured)


@pytest.mark.data
def test_shipped_calibration_reproduces_from_data(tmp_path):
    shared_data("aiconfigurator")
    from estimators import calibrate

    fresh = calibrate.calibrate(calibrate.DEFAULT_DATA if calibrate.DEFAULT_DATA.exists() else shared_data())
    shipped = kernels.calibration()
    for gpu in ("H100", "H200"):
        for kind, params in shipped["kernels"][gpu].items():
            for key, value in params.items():
                assert fresh["kernels"][gpu][kind][key] == pytest.approx(value, rel=1e-3), (gpu, kind, key)


def test_derived_types_scale_by_bandwidth_and_flops():
    h20 = gpus.get("H20")
    # memory-bound: attention over a long KV is faster on H20 (4.0 vs 3.35 TB/s)
    assert kernels.decode_attention_ms(h20, 64, 12, 2, 128, 16384) < kernels.decode_attention_ms(H100, 64, 12, 2, 128, 16384)
    # compute-bound: a big GEMM is about 989/148 slower on H20
    ratio = kernels.gemm_ms(h20, 8192, 8192, 8192) / kernels.gemm_ms(H100, 8192, 8192, 8192)
    assert ratio == pytest.approx(989 / 148, rel=0.05)
    # H800 = H100 kernels
    assert kernels.gemm_ms(gpus.get("H800"), 64, 4096, 4096) == kernels.gemm_ms(H100, 64, 4096, 4096)


def test_decode_step_monotone_in_batch_and_kv():
    a = rollout.decode_step_ms(QWEN7B, H100, 1, 8, 1024)
    b = rollout.decode_step_ms(QWEN7B, H100, 1, 64, 1024)
    c = rollout.decode_step_ms(QWEN7B, H100, 1, 64, 8192)
    assert a < b < c
    # TP halves the weight reads: the step at TP2 is faster at small batch
    assert rollout.decode_step_ms(QWEN7B, H100, 2, 8, 1024) < a


def test_linear_step_model_tracks_kernel_model():
    lin = rollout.linear_step_model(QWEN7B, H100, 1, 128)
    for b, kv in [(4, 1000), (64, 4000), (128, 8000)]:
        assert float(lin(b, b * kv)) == pytest.approx(rollout.decode_step_ms(QWEN7B, H100, 1, b, kv), rel=0.15)


def test_engine_makespan_by_hand():
    step = rollout.LinearStep(a_ms=10.0, b_ms=0.0, c_ms=0.0)
    # two slots, lengths 5, 3, 4: slot A runs 5; slot B runs 3 then 4 -> makespan 7 steps of 10 ms
    assert rollout.engine_makespan_s(np.array([5, 3, 4]), 0.0, 2, step) == pytest.approx(0.07)
    # attention term: one sequence of 3 tokens after a 10-token prompt: kv 10, 11, 12 -> c*(33)
    step = rollout.LinearStep(a_ms=0.0, b_ms=0.0, c_ms=1.0)
    assert rollout.engine_makespan_s(np.array([3]), 10.0, 1, step) == pytest.approx(0.033)


def test_conservative_phase_decreases_with_gpus_and_bounds_sampled():
    t8 = rollout.conservative_phase_s(QWEN7B, H100, 1, 8, 1024, 512, 4096)
    t16 = rollout.conservative_phase_s(QWEN7B, H100, 1, 16, 1024, 512, 4096)
    assert t16 < t8
    rng = np.random.default_rng(0)
    dist = lengths.LengthDistribution("servegen", max_tokens=4096)
    sampled = rollout.sampled_phase_s(QWEN7B, H100, 1, 8, dist.sample(1024, rng), 512, 4096)
    assert sampled < t8



def test_conservative_phase_is_its_waves_by_hand_and_cheap_for_huge_batches():
    """Waves of an engine's concurrency, each L decode steps at the mean cached length plus its
    prefill; the full waves are counted, not looped, so an absurd batch (a fuzzed API request)
    costs what a small one does."""
    P, L, n_gpus = 512, 4096, 8
    conc = rollout.max_concurrency(QWEN7B, H100, 1, P + L)
    n = 8 * (3 * conc + 5)  # per engine: three full waves and one of five

    def wave(b):
        return L * rollout.decode_step_ms(QWEN7B, H100, 1, b, P + L / 2) + rollout.prefill_ms(QWEN7B, H100, 1, b, P)

    want = (wave(conc) + wave(conc) + wave(conc) + wave(5)) / 1e3
    assert rollout.conservative_phase_s(QWEN7B, H100, 1, n_gpus, n, P, L) == pytest.approx(want, rel=1e-12)
    huge = 8 * conc * 10**12
    assert rollout.conservative_phase_s(QWEN7B, H100, 1, n_gpus, huge, P, L) == pytest.approx(10**12 * wave(conc) / 1e3, rel=1e-12)

# ---------------------------------------------------------------------------- lengths, tools
def test_servegen_mixture_has_a_long_tail():
    d = lengths.LengthDistribution("servegen")
    p50, p99, pmax = d.quantile([0.5, 0.99, 1.0])
    assert 300 < p50 < 1500 and p99 > 8 * p50 and pmax == 32768


def test_length_clipping_and_scale():
    rng = np.random.default_rng(1)
    d = lengths.LengthDistribution("servegen", scale=2.0, max_tokens=4096)
    s = d.sample(10000, rng)
    assert s.max() <= 4096 and np.median(s) == pytest.approx(2 * np.median(lengths.LengthDistribution().sample(10000, rng)), rel=0.1)


def test_grouped_sampling_shape_and_correlation():
    rng = np.random.default_rng(2)
    s = lengths.sample_grouped(lengths.LengthDistribution("lognormal", median_tokens=1000, sigma=0.5), 200, 16, rng).reshape(200, 16)
    means = s.mean(axis=1)
    assert s.shape == (200, 16) and means.std() > 0.3 * means.mean()


def test_tool_latency_table_matches_rollpacker_summary():
    v = lengths.tool_latencies_s()
    assert len(v) == 2001
    assert np.median(v) == pytest.approx(0.031, abs=0.01) and v.max() == pytest.approx(21, abs=1)


# ----------------------------------------------------------------------------------- curves
def test_fit_concave_is_concave_and_exact_on_concave_data():
    pts = [(1, 10), (2, 18), (4, 30), (8, 40)]
    c = curves.fit_concave(pts)
    assert c.is_concave()
    assert np.allclose(c.ys, [10, 18, 30, 40])


def test_fit_concave_repairs_a_convex_kink():
    c = curves.fit_concave([(1, 10), (2, 12), (3, 30)])
    assert c.is_concave() and c(3) <= 30 + 1e-9
    # least squares on slopes: slopes 2 and 18 over unit intervals pool to 10
    assert c.ys[1] == pytest.approx(20) and c.ys[2] == pytest.approx(30)


def test_segments_reproduce_curve_as_minimum():
    c = curves.fit_concave([(2, 10), (4, 16), (8, 20)])
    for x in [0.5, 2, 3, 6, 8]:
        assert min(s * x + b for s, b in c.segments()) == pytest.approx(float(c(x)))


def test_online_rls_converges_and_records_error():
    true = curves.fit_concave([(1, 10), (2, 18), (4, 28), (8, 34)])
    start = curves.fit_concave([(1, 14), (2, 24), (4, 40), (8, 50)])
    on = curves.OnlineCurve(start, forgetting=0.95)
    rng = np.random.default_rng(3)
    for _ in range(300):
        x = float(rng.choice([1, 2, 3, 4, 6, 8]))
        on.update(x, float(true(x)) * (1 + rng.normal(0, 0.01)))
    assert on.curve.is_concave()
    assert np.allclose(on.curve.ys, true.ys, rtol=0.05)
    first = on.history[0]
    assert abs(first[1] - first[2]) / first[2] > 0.2  # the first prediction was off by > 20 %
    assert on.mape(last=20) < 0.03  # the last twenty are within noise


# ----------------------------------------------------------------------------- communication
def test_weight_sync_schemes_by_hand():
    w = 15e9
    links = comm.SyncLinks(trainer_nic_gb_per_s=400, rollout_nic_gb_per_s=800, inter_cluster_gb_per_s=100)
    h20 = gpus.get("H20")
    flat = comm.weight_sync_s(w, 16, 2, h20, links, "flat")
    assert flat == pytest.approx(16 * w / 100e9)
    sb = comm.weight_sync_s(w, 16, 2, h20, links, "scatter_broadcast")
    cross = w / 100e9
    gather = w * 0.5 / (50e9 * 8)
    assert sb == pytest.approx(cross + gather + float(kernels.p2p_ms(h20, w, inter_node=False)) / 1e3)
    assert sb < flat


def test_migration_and_switch_costs():
    t = comm.migration_s(H100, 10e9, inter_node=True)
    assert t > comm.RESTART_S + comm.GROUP_REBUILD_S
    assert comm.migration_s(H100, 10e9, inter_node=False) < t
    m = models.preset("qwen2.5-32b")
    st = memory.training_state(m)
    state = st.weights_bytes + st.master_bytes + st.moments_bytes
    cold = comm.cold_start_s(state / 2, state / 16, gpus.get("H800"))
    warm = comm.warm_switch_s(state / 16, gpus.get("H800"))
    assert 100 < cold < 150 and 40 < cold / warm < 100  # Weave: up to 135 s cold, up to 71.5x warm speed-up
