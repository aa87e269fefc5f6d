"""The model-file fuzzer (``scripts/fuzz/model_files.py``): a short run is clean, a
planted crash or hang is reported with its case id, and a case repeats exactly."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from polyhal.interop.loading import load_model
from polyhal.ir import current_limits

pytest.importorskip("onnx")
pytest.importorskip("nir")
pytest.importorskip("h5py")

ROOT = Path(__file__).resolve().parents[1]
CASES = 100


def test_a_short_run_of_every_format_loads_some_and_refuses_some(fuzzer, tmp_path):
    lines: list[str] = []
    result = fuzzer.fuzz(seed=0, cases=CASES, workdir=tmp_path, report=lines.append)
    assert result.exit_code == 0, "\n".join(lines)
    assert [line.split(":")[0] for line in lines] == list(fuzzer.FORMATS)
    for fmt, stats in result.stats.items():
        assert stats.cases == CASES, fmt
        assert 0 < stats.loaded < CASES, stats.summary()
        assert stats.refused > 0, stats.summary()
        assert stats.findings == 0, stats.summary()


def test_a_loader_that_raises_a_bare_key_error_is_a_finding_named_by_its_case(
        fuzzer, tmp_path):
    def loader(path: Path, **options: object) -> object:
        if len(path.read_bytes()) % 2:
            raise KeyError("planted")
        return load_model(path, **options)

    lines: list[str] = []
    result = fuzzer.fuzz(["json"], seed=5, cases=10, keep=tmp_path / "keep",
                         workdir=tmp_path / "work", loader=loader, report=lines.append)
    assert result.exit_code == 1
    assert result.findings
    for finding in result.findings:
        assert (finding.kind, finding.stage, finding.error) == ("crash", "load", "KeyError")
        assert finding.case_id.startswith("json:5:")
        report = f"FINDING {finding.case_id}: crash while loading: KeyError: 'planted'\n"
        assert any(line.startswith(report) for line in lines)
        kept = tmp_path / "keep" / finding.case_id.replace(":", "-")
        assert (kept / "model.json").is_file()
        assert f"--case {finding.case_id}" in (kept / "case.txt").read_text()
    assert result.stats["json"].findings == len(result.findings)


def test_a_loader_that_overruns_the_time_limit_is_a_hang(fuzzer, tmp_path):
    def loader(path: Path, **options: object) -> object:
        time.sleep(5)
        raise AssertionError("not interrupted")

    start = time.monotonic()
    result = fuzzer.fuzz(["onnx"], seed=0, cases=1, seconds=0.2, workdir=tmp_path,
                         loader=loader, report=lambda line: None)
    assert time.monotonic() - start < 3
    assert [(f.case_id, f.kind) for f in result.findings] == [("onnx:0:0", "hang")]
    assert result.exit_code == 1


def test_a_loader_that_unpickles_the_planted_object_array_is_a_finding(fuzzer, tmp_path):
    def loader(path: Path, **options: object) -> object:
        with np.load(path.with_suffix(".npz"), allow_pickle=True) as tensors:
            for key in tensors.files:
                tensors[key]  # reading the entry is what unpickles it
        return load_model(path, **options)

    case = next(case for case in (fuzzer.make_case("json", 0, i) for i in range(500))
                if len(case.mutations) == 1 and "pickled object array" in case.mutations[0])
    outcome = fuzzer.run_case(case, tmp_path, loader=loader)
    assert (outcome.case_id, outcome.kind) == (case.id, "unpickled")
    assert fuzzer.run_case(case, tmp_path).kind == "refused"  # polyhal itself never unpickles


def test_a_case_stops_the_nir_parser_at_half_its_time_limit(fuzzer, tmp_path):
    seen = []

    def loader(path: Path, **options: object) -> object:
        seen.append(current_limits())
        return load_model(path, **options)

    fuzzer.run_case(fuzzer.make_case("nir", 0, 0), tmp_path, seconds=8.0, loader=loader)
    assert seen[0].max_parse_seconds == 4.0
    assert dataclasses.replace(seen[0], max_parse_seconds=fuzzer.FUZZ_LIMITS.max_parse_seconds) \
        == fuzzer.FUZZ_LIMITS


@pytest.mark.parametrize("case_id", ["json:0:3", "onnx:2:7", "nir:1:4"])
def test_a_case_repeats_exactly(fuzzer, tmp_path, case_id):
    fmt, seed, index = fuzzer.parse_case_id(case_id)
    first, second = fuzzer.make_case(fmt, seed, index), fuzzer.make_case(fmt, seed, index)
    assert first == second
    outcomes = [fuzzer.run_case(first, tmp_path / "a"), fuzzer.run_case(second, tmp_path / "b")]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0].case_id == case_id and not outcomes[0].is_finding


def test_the_case_option_reports_the_same_outcome_twice(fuzzer, capsys):
    runs = []
    for _ in range(2):
        assert fuzzer.main(["--case", "json:0:7", "--memory-gb", "0"]) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1]
    assert runs[0].startswith("json:0:7: ")


def test_the_command_line_exit_status_follows_the_findings(fuzzer, capsys):
    assert fuzzer.main(["--format", "json", "--cases", "2", "--memory-gb", "0"],
                       loader=lambda path, **options: {}["planted"]) == 1
    assert "FINDING json:0:0: crash while loading: KeyError" in capsys.readouterr().out
    assert fuzzer.main(["--case", "json:0", "--memory-gb", "0"]) == 2


def test_the_script_runs_from_the_repository_root(tmp_path):
    command = [sys.executable, "scripts/fuzz/model_files.py", "--format", "onnx", "--cases",
               "5", "--seed", "3", "--keep", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("onnx: 5 cases, "), done.stdout
    assert not list(tmp_path.iterdir())  # no finding, nothing kept


def test_a_case_is_the_same_in_another_process(fuzzer, capsys):
    command = [sys.executable, "scripts/fuzz/model_files.py", "--case", "nir:3:11"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert fuzzer.main(["--case", "nir:3:11", "--memory-gb", "0"]) == done.returncode == 0
    assert capsys.readouterr().out == done.stdout


_DIGEST = """
import hashlib, sys
sys.path.insert(0, "scripts/fuzz")
from model_files import make_case
digest = hashlib.sha256()
for fmt, count in (("onnx", 150), ("json", 60), ("nir", 20)):
    for index in range(count):
        case = make_case(fmt, 0, index)
        digest.update(repr((case.base, case.mutations, case.options)).encode())
        for name, content in sorted(case.files.items()):
            digest.update(name.encode() + (content if isinstance(content, bytes) else
                                           repr(content).encode()))
print(digest.hexdigest())
"""


def test_case_files_do_not_depend_on_the_hash_seed():
    """A case id names the same files in every process: nothing is drawn from a
    set, whose order follows ``PYTHONHASHSEED``."""
    digests = {subprocess.run([sys.executable, "-c", _DIGEST], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout
               for seed in ("0", "1")}
    assert len(digests) == 1, digests
