"""`hyperlaunch prepare-data --slurm`: its batch script (golden files for one node and several,
values quoted, bash -n and shellcheck clean), submitted through stub sbatch with its inputs,
output, tokenizer and Python checked first, and its three steps across nodes run by the CLI as
the script runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.script.render_prepare import render_prepare
from tests.support.cli_runner import one_error_line, run_cli, stub_slurm
from tests.support.token_corpus import _docs, _stream, _write_jsonl

GOLDEN = Path(__file__).parents[1] / "golden"
COMMAND = ["/fsx/venvs/hl/bin/python", "-m", "hyperlaunch", "prepare-data", "--output", "/fsx/data/team's corpus", "--tokenizer", "offline"]
INPUTS = ["/fsx/raw/part one.jsonl", "/fsx/raw/more"]


def _script(nodes: int) -> str:
    return render_prepare(
        command=COMMAND, inputs=INPUTS, output="/fsx/data/team's corpus", nodes=nodes, job_name="prepare-data-team's corpus",
        log="/fsx/logs/prepare-data_%j.out", partition="cpu", time="0-02:00:00", dependency="afterok:41" if nodes > 1 else None,
    )


@pytest.mark.parametrize(("nodes", "name"), [(1, "prepare_data.sbatch"), (3, "prepare_data_nodes.sbatch")])
@pytest.mark.slow
def test_golden(nodes: int, name: str, tmp_path: Path) -> None:
    rendered = _script(nodes).replace("0.1.0", "VERSION")
    golden = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"{name} changed; if intended: UPDATE_GOLDEN=1 pytest tests/unit/runs/test_prepare_data_slurm.py -k golden"
    script = tmp_path / "prepare.sh"
    script.write_text(rendered)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    if shutil.which("shellcheck") is not None:
        checked = subprocess.run(["shellcheck", "--shell=bash", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout


@pytest.mark.slow
def test_each_step_gets_the_words_as_given(tmp_path: Path) -> None:
    """The script run with its programs replaced by one that prints its arguments: every line
    reaches prepare-data word for word, the inputs after `--`."""
    script = tmp_path / "prepare.sh"
    text = _script(3).replace("/fsx/venvs/hl/bin/python", "printf '%s\\n' PY").replace("\nsrun ", "\nprintf '%s\\n' SRUN ")
    script.write_text(text)
    words = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout.split("\n")
    lines = "\n".join(words).split("PY\n")[1:]
    assert [line.split("\n")[line.split("\n").index("--step") + 1] for line in lines] == ["plan", "share", "finish"]
    for line in lines:
        parts = line.split("\n")
        assert parts[parts.index("--output") + 1] == "/fsx/data/team's corpus"
        assert parts[parts.index("--") + 1 : parts.index("--") + 3] == INPUTS
    assert "--nodes=3" in text and "#SBATCH --exclusive" in text and "#SBATCH --dependency=afterok:41" in text


# Stub sbatch: keeps the script it was given and answers job 90. Stub squeue: every job it is
# asked about waits in the queue.
_SBATCH = '#!/bin/sh\nfor arg in "$@"; do last=$arg; done\ncp "$last" "$STUB/submitted.sbatch"\necho "Submitted batch job 90"\n'
_SQUEUE = "#!/bin/sh\necho PENDING\n"


@pytest.fixture()
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = stub_slurm(tmp_path / "stub", {"sbatch": _SBATCH, "squeue": _SQUEUE}, tmp_path, monkeypatch)
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    (tmp_path / "raw").mkdir()
    _write_jsonl(tmp_path / "raw" / "a.jsonl", _docs(50))
    return folder


@pytest.mark.slow
def test_slurm_submits_the_preparation_as_a_job(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli(["prepare-data", "raw", "-m", "qwen3_tiny", "-o", "data/corpus", "--slurm", "--nodes", "2", "--after", "41", "--json"], monkeypatch)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["job_id"] == "90" and doc["nodes"] == 2 and doc["after"] == ["41"] and doc["tokenizer"] == "offline"
    assert doc["output"] == str(tmp_path / "data" / "corpus") and doc["inputs"] == [str(tmp_path / "raw")]
    assert doc["log"] == str(tmp_path / "logs" / "prepare-data-corpus_90.out") and doc["python"] == sys.executable
    script = (stub / "submitted.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --dependency=afterok:41" in script
    assert f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 {sys.executable} -m hyperlaunch prepare-data" in script
    assert not (tmp_path / "data").exists(), "the job writes the folder, not submit"
    text = run_cli(["prepare-data", "raw", "-m", "qwen3_tiny", "-o", "one", "--slurm"], monkeypatch).stdout
    assert "submitted prepare-data job 90" in text and "submit --after 90:ok --data" in text
    assert "--step" not in (stub / "submitted.sbatch").read_text() and "#SBATCH --nodes=1" in (stub / "submitted.sbatch").read_text()


@pytest.mark.slow
def test_bad_slurm_input_is_one_line_and_submits_nothing(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    base = ["prepare-data", "-m", "qwen3_tiny", "--slurm"]
    for args, code, parts in (
        (["prepare-data", "raw", "-m", "qwen3_tiny", "-o", "x", "--nodes", "2", "--after", "4"], 2, ("--nodes, --after: for --slurm only",)),
        ([*base, "missing.jsonl", "-o", "x"], 2, ("missing.jsonl: no such file",)),
        ([*base, "raw", "-o", "afile"], 2, ("is a file, not a folder",)),
        ([*base, "raw", "-o", "taken"], 2, ("holds other files (notes.txt)",)),
        ([*base, "raw", "-o", "x", "--after", "4;rm"], 2, ("--after", "JOB:ok or JOB:any")),
        ([*base, "raw", "-o", "x", "--step", "plan"], 2, ("--step is what the --slurm job runs",)),
        (["prepare-data", "raw", "--tokenizer", "./nowhere", "-o", "x", "--slurm"], 2, ("--tokenizer ./nowhere: no such directory",)),
        ([*base, "raw", "-o", "x", "--shard-mb", "0"], 2, ("--shard-mb must be > 0",)),
        (["prepare-data", "raw", "-m", "qwen3_tiny", "-o", "x", "--step", "share"], 2, ("--step share runs inside the --slurm job's script", "SLURM_PROCID")),
        (["prepare-data", "raw", "-m", "qwen3_tiny", "-o", "x", "--step", "merge"], 2, ("--step 'merge' is not one of: plan, share, finish",)),
    ):
        one_error_line(run_cli(args, monkeypatch), code, *parts)
    assert run_cli([*base, "raw", "-o", "x", "--nodes", "0"], monkeypatch).exit_code == 2  # Click's usage error
    assert not (stub / "submitted.sbatch").exists() and not (tmp_path / "x").exists()
    # Behind another job the inputs may not exist yet: that job may write them.
    later = run_cli([*base, "not-yet/", "-o", "x", "--after", "41:ok"], monkeypatch)
    assert later.exit_code == 0, later.stderr


def test_the_three_steps_as_the_script_runs_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = [str(_write_jsonl(tmp_path / f"{n}.jsonl", _docs(150, seed=n))) for n in range(2)]
    monkeypatch.chdir(tmp_path)
    common = ["prepare-data", "-m", "qwen3_tiny", "-o", "shared", "--workers", "1", "--shard-mb", "0.002"]
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    assert "planned the units" in run_cli([*common, "--step", "plan", "--", *inputs], monkeypatch).stdout
    monkeypatch.setenv("SLURM_NTASKS", "2")
    for rank in (1, 0):
        monkeypatch.setenv("SLURM_PROCID", str(rank))
        said = run_cli([*common, "--step", "share", "--", *inputs], monkeypatch)
        assert said.exit_code == 0 and said.stdout.startswith(f"node {rank + 1} of 2: "), said.output
    finished = run_cli([*common, "--step", "finish", "--json", "--", *inputs], monkeypatch)
    assert finished.exit_code == 0, finished.stderr
    assert json.loads(finished.stdout)["status"] == "prepared" and fmt.is_prepared(tmp_path / "shared")
    alone = run_cli(["prepare-data", "-m", "qwen3_tiny", "-o", "alone", "--workers", "1", "--shard-mb", "0.002", "--", *inputs], monkeypatch)
    assert alone.exit_code == 0, alone.stderr
    assert _stream(tmp_path / "shared") == _stream(tmp_path / "alone")
