"""A request's sampling settings, one reading for every engine.

A request record may carry ``sampling`` (the executor's name: what ``tinylm`` and the docs use)
and / or ``sampling_params`` (SGLang's name and keys: ``max_new_tokens``, ``temperature``,
``top_p``, ``top_k``, ``min_p``, ``min_new_tokens``, ``stop_token_ids``, ...). Both are read,
merged, and carried with the request across every move; the same key given in both with
different values is refused (naming it), so a setting is never silently ignored. Engines take
what they support: the ``tinylm`` engine reads ``temperature``; the SGLang worker sends the whole
mapping as SGLang ``sampling_params``, with ``max_new_tokens`` defaulting to the record's
``target_len`` and ``temperature`` to 0 (greedy).
"""

from __future__ import annotations


class SamplingConflict(ValueError):
    pass


def merged(req: dict) -> dict:
    """``sampling`` and ``sampling_params`` of a request record, as one mapping."""
    a, b = req.get("sampling") or {}, req.get("sampling_params") or {}
    if not isinstance(a, dict) or not isinstance(b, dict):
        raise SamplingConflict(f"request {req.get('id')!r}: sampling / sampling_params must be mappings")
    clash = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    if clash:
        k = clash[0]
        raise SamplingConflict(f"request {req.get('id')!r}: sampling.{k} = {a[k]!r} but sampling_params.{k} = {b[k]!r}; "
                               f"give each setting once (either mapping is read)")
    return {**a, **b}


def sglang_params(req: dict) -> dict:
    """SGLang ``sampling_params`` for a request record (budget: ``target_len``; greedy by default)."""
    sp = merged(req)
    if "max_new_tokens" not in sp:
        sp["max_new_tokens"] = int(req.get("target_len", 128))
    sp.setdefault("temperature", 0.0)
    return sp
