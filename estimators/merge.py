"""Deep merge of JSON/YAML data: what a scenario's ``include:`` overlays and a calibration folder's
files share (:mod:`planner.schema.loader`, :mod:`estimators.datadir`)."""

from __future__ import annotations

from typing import Any


def deep_merge(base: Any, top: Any) -> Any:
    """``top`` over ``base``: mappings merge key by key (recursively); anything else, lists included,
    is replaced by ``top``. Neither input is modified."""
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for k, v in top.items():
            out[k] = deep_merge(base[k], v) if k in base else v
        return out
    return top
