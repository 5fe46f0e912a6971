"""Telemetry from SGLang engines: their Prometheus ``/metrics`` into the snapshot's ``workers``.

SGLang (``--enable-metrics``) exports, per engine, gauges labelled by ``model_name``:

| metric | snapshot field |
|---|---|
| ``sglang:num_running_reqs`` | ``requests_in_flight`` |
| ``sglang:num_queue_reqs`` | ``queue_depth`` |
| ``sglang:num_used_tokens`` | ``kv_used_tokens`` |
| ``sglang:token_usage`` (used / capacity of the KV pool) | with the above: ``kv_capacity_tokens = used / usage`` |
| ``sglang:gen_throughput`` (tokens/s) | ``tokens_per_s`` |

The KV capacity comes from the engine's declaration (``kv_capacity_tokens``, e.g. from
``/get_server_info``'s ``max_total_num_tokens``) when given, else from used / usage; an engine
that reports neither is refused with the fix. Series of several label sets (several models in
one server) are summed (counts, tokens, throughput). The result validates as
:class:`formulation.realloc.telemetry.WorkerTelemetry`, and :func:`snapshot` builds the whole
document the daemon's ``POST /v1/telemetry`` takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from planner.errors import Problem, UserError

METRICS = {"requests_in_flight": "sglang:num_running_reqs", "queue_depth": "sglang:num_queue_reqs",
           "kv_used_tokens": "sglang:num_used_tokens", "token_usage": "sglang:token_usage",
           "tokens_per_s": "sglang:gen_throughput"}


@dataclass(frozen=True)
class Engine:
    """One SGLang engine as the job knows it."""

    url: str  # http://host:port
    worker_id: str
    component: str
    node: str
    gpu_type: str
    gpus: int = 1
    kv_capacity_tokens: Optional[float] = None


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {snapshot field or 'token_usage': value} (summed over label sets)."""
    from prometheus_client.parser import text_string_to_metric_families

    names = {v: k for k, v in METRICS.items()}
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            field = names.get(s.name)
            if field is not None:
                out[field] = out.get(field, 0.0) + float(s.value)
    return out


def worker_sample(e: Engine, text: str) -> dict:
    """One engine's ``workers`` entry of a snapshot, from its /metrics text."""
    m = parse_metrics(text)
    used = m.get("kv_used_tokens")
    usage = m.get("token_usage")
    cap = e.kv_capacity_tokens
    if used is None and usage is not None and cap:
        used = usage * cap
    if cap is None and used is not None and usage:
        cap = used / usage
    if used is None or cap is None:
        raise UserError(Problem(f"engine {e.worker_id} ({e.url})",
                                f"its /metrics lack {METRICS['kv_used_tokens']} or {METRICS['token_usage']} (KV-cache usage)",
                                "start SGLang with --enable-metrics, or give the engine's kv_capacity_tokens"))
    if cap <= 0:
        cap = 1.0  # an idle engine with an empty pool: usage 0 of a nominal pool
    return {"worker_id": e.worker_id, "component": e.component, "node": e.node, "gpu_type": e.gpu_type, "gpus": e.gpus,
            "kv_used_tokens": min(used, cap), "kv_capacity_tokens": cap, "queue_depth": int(m.get("queue_depth", 0)),
            "tokens_per_s": m.get("tokens_per_s", 0.0), "requests_in_flight": int(m.get("requests_in_flight", 0))}


def collect(engines: list[Engine], timeout_s: float = 5.0) -> list[dict]:
    """GET every engine's /metrics (one client, a timeout each); an unreachable engine is refused by name."""
    import httpx

    out = []
    with httpx.Client(timeout=timeout_s) as c:
        for e in engines:
            try:
                r = c.get(e.url.rstrip("/") + "/metrics")
                r.raise_for_status()
            except httpx.HTTPError as exc:
                raise UserError(Problem(f"engine {e.worker_id}", f"GET {e.url}/metrics failed: {exc}",
                                        "check the engine's address and that it runs with --enable-metrics")) from None
            out.append(worker_sample(e, r.text))
    return out


def snapshot(job: str, time_s: float, iteration: int, components: list[dict], engines: list[Engine],
             extra_workers: Optional[list[dict]] = None, timeout_s: float = 5.0) -> dict:
    """A validated telemetry snapshot: ``components`` as the job reports them, the engines' workers
    from their /metrics, plus any other workers (trainer ranks, ...) the job adds."""
    from formulation.realloc.telemetry import TelemetrySnapshot

    body = {"job": job, "time_s": time_s, "iteration": iteration, "components": components,
            "workers": collect(engines, timeout_s) + list(extra_workers or [])}
    return TelemetrySnapshot.model_validate(body).model_dump(mode="json", exclude_none=True)
