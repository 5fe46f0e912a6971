"""Property-based fuzzing of every endpoint in the daemon's OpenAPI document, over real HTTP.

Schemathesis derives Hypothesis strategies from the document the running daemon serves: schema-valid
requests (positive) and requests that break it (negative: wrong types, missing fields, bad query
values). For each response: never a 5xx, the status is one the document declares for that
operation, and (positive) the body matches the declared response schema. The runs are
derandomised so CI sees the same cases every time; raise ``FUZZ_EXAMPLES`` to search longer.
"""

from __future__ import annotations

import json
import os

import pytest
from daemonproc import healthy, query, serve

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.generation.modes import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from planner.schema.scenario import JobSpec  # noqa: E402

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    yield from serve(tmp_path_factory, "fuzz", "--period-s", "0.5", "--rate-limit", "0")


def _fuzz(daemon, mode: GenerationMode, checks: list, examples: int) -> dict:
    schema = schemathesis.openapi.from_url(f"{daemon.url}/openapi.json", headers=daemon.headers())
    seen: dict[str, set] = {}

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy(mode))
    def run(case):
        resp = case.call(base_url=daemon.url, timeout=30, headers=daemon.headers())
        seen.setdefault(f"{case.method} {case.path}", set()).add(resp.status_code)
        case.validate_response(resp, checks=checks)

    run()
    print(mode.value, {k: sorted(v) for k, v in sorted(seen.items())})
    return seen


def test_positive_requests_get_documented_responses(daemon):
    seen = _fuzz(daemon, GenerationMode.POSITIVE,
                 [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance], EXAMPLES)
    assert len(seen) >= 8, f"every operation was exercised: {sorted(seen)}"
    assert all(code < 500 for codes in seen.values() for code in codes)


def test_negative_requests_are_refused_with_4xx(daemon):
    seen = _fuzz(daemon, GenerationMode.NEGATIVE, [not_a_server_error, status_code_conformance], EXAMPLES)
    codes = {c for cs in seen.values() for c in cs}
    assert codes and all(c < 500 for c in codes)
    assert 422 in codes


def test_whatever_was_fuzzed_the_state_holds_only_valid_jobs(daemon):
    for row in query(daemon.state, "SELECT spec FROM jobs"):
        JobSpec.model_validate(json.loads(row["spec"]))
    with daemon.client() as c:
        assert healthy(c.get("/v1/health").json())
