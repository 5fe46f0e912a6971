"""Every daemon process a daemon test starts is ended when its test (or its module's fixture) is
over, also when the test failed: no orphan daemon keeps running after the suite."""

from __future__ import annotations

import daemonproc
import pytest


@pytest.fixture(autouse=True, scope="module")
def _end_module_daemons():
    since = len(daemonproc.STARTED)
    yield
    daemonproc.end_started(since)


@pytest.fixture(autouse=True)
def _end_test_daemons():
    since = len(daemonproc.STARTED)  # module fixtures' daemons were started before: they stay
    yield
    daemonproc.end_started(since)
