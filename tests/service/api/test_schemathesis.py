"""Property-based fuzzing of the real server from its own OpenAPI schema (schemathesis): for
every route but /answer (generation is too slow for many examples on CPU), requests drawn from the
schema get an answer that is no 5xx, has a documented status and content type, and matches the
documented response schema.

``FUZZED`` is written out so that pytest can name each route; ``operations`` checks that it is
exactly the schema's operations less /answer, so a route added to the app cannot go unfuzzed.

The operations are driven through schemathesis' Python API and Hypothesis directly (schemathesis'
pytest plugin does not run under pytest 9)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]


FUZZED = [
    "POST /search", "POST /rerank", "POST /diagnose", "POST /admin/reload", "GET /health", "GET /ready", "GET /info",
    "GET /metrics", "POST /embed", "POST /", "POST /tokenize", "POST /v1/embeddings", "POST /v1/rerank",
    "POST /v2/rerank", "GET /v1/models",
]  # fmt: skip


@pytest.fixture(scope="module")
def operations(server):
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json").exclude(path="/answer")
    ops = {f"{op.method.upper()} {op.path}": op for op in (result.ok() for result in schema.get_all_operations())}
    assert sorted(ops) == sorted(FUZZED), "every route in the OpenAPI but /answer is fuzzed: update FUZZED"
    return ops


@pytest.mark.parametrize("name", FUZZED)
def test_no_5xx_and_no_schema_violation(operations, server, name):
    @given(case=operations[name].as_strategy())
    @settings(max_examples=15, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def run(case):
        case.call_and_validate(base_url=server, checks=CHECKS, timeout=120)

    run()
