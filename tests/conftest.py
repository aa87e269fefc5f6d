"""Fixtures shared across test folders."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = str(Path(__file__).resolve().parents[1])
QUIET_RAY = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="session")
def ray_instance():
    """A local Ray on loopback with 2 CPUs, started once for the test run; its workers
    can import ``tests``. Ray is in the ``test`` extra: a missing Ray fails here."""
    import ray

    with pytest.MonkeyPatch.context() as patch:
        for key, value in QUIET_RAY.items():
            patch.setenv(key, value)
        path = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1", runtime_env={"env_vars": {"PYTHONPATH": path}})
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.fixture(scope="session")
def polyhal_wheel(tmp_path_factory):
    """polyhal's wheel, built once per test run from a copy of this checkout."""
    from tests.fresh_venv import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture
def worker_requests(monkeypatch):
    """``watch(proxy)``: the list that the ops of every request the isolated device
    ``proxy`` sends to its worker are appended to, from then on."""

    def watch(proxy) -> list[str]:
        sent: list[str] = []
        exchange = proxy._exchange

        def counted(channel, call, op, args, timeout):
            sent.append(op)
            return exchange(channel, call, op, args, timeout)

        monkeypatch.setattr(proxy, "_exchange", counted)
        return sent

    return watch


@pytest.fixture(scope="module")
def fuzzer():
    """The model-file fuzzer's driver (``scripts/fuzz/model_files.py``). It puts its own
    folder on ``sys.path`` for its siblings ``seeds`` and ``mutate*`` (``mutate``
    imports the format modules when it first mutates); that entry is taken off again
    once the module's tests are done."""
    path = list(sys.path)
    sys.path.insert(0, str(Path(REPO_ROOT) / "scripts" / "fuzz"))
    try:
        yield importlib.import_module("model_files")
    finally:
        sys.path[:] = path
