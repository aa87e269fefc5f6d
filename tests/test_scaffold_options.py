"""The adapter ``polyhal new-adapter`` writes refuses ``open`` options it does not know,
as the built-in adapters do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from polyhal import hal
from polyhal.errors import UnsupportedError
from polyhal.scaffold import scaffold


@pytest.fixture
def scaffolded(tmp_path, monkeypatch):
    """The generated adapter, registered in this process without installing it."""
    scaffold("scaffolded-opts", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "polyhal-scaffolded-opts"))
    from polyhal_scaffolded_opts import ScaffoldedOptsAdapter

    hal.register(ScaffoldedOptsAdapter)
    yield tmp_path / "polyhal-scaffolded-opts"
    hal.unregister("scaffolded-opts")
    sys.modules.pop("polyhal_scaffolded_opts.adapter", None)
    sys.modules.pop("polyhal_scaffolded_opts", None)


def test_an_unknown_open_option_is_an_unsupported_error_naming_it(scaffolded):
    with pytest.raises(UnsupportedError, match=r"^scaffolded-opts: unknown option\(s\) colour, "
                                               r"threads \(known: none\)$"):
        hal.open_device("scaffolded-opts", threads=2, colour="blue")
    with hal.open_device("scaffolded-opts") as device:  # no options: it opens
        assert device.capabilities.claimed_ops


def test_the_generated_tests_still_pass(scaffolded):
    """The package's own conformance test, run as its author would after ``pip install
    -e`` (here the folder is on ``PYTHONPATH`` and the adapter registered by a conftest):
    the runner opens its device without options."""
    (scaffolded / "tests" / "conftest.py").write_text(
        "from polyhal import hal\nfrom polyhal_scaffolded_opts import ScaffoldedOptsAdapter\n\n"
        "hal.register(ScaffoldedOptsAdapter)\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=scaffolded, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(scaffolded)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
