"""`--env NAME` without a value: the variable reaches the job from the submitting environment
(sbatch --export), and its value is in no file hyperlaunch writes, the script and the record
hold the name only. Through the real CLI, with a fake sbatch."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hyperlaunch.job.plan import build_spec
from hyperlaunch.runs import jobs
from hyperlaunch.script.render import render_sbatch
from hyperlaunch.slurm import submission as slurm_submission
from tests.support.cli_runner import CliResult, run_cli
from tests.support.sbatch_harness import run_script

SECRET = "hf_s3cret-value-never-written"


def _fake_sbatch(directory: Path) -> Path:
    """An sbatch that records its arguments and whether HF_TOKEN reached it (not the value)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "sbatch"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {directory}/argv\n'
        f'[ "${{HF_TOKEN:-}}" = "{SECRET}" ] && echo reached > {directory}/token\n'
        'echo "Submitted batch job 5151"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return directory


def _submit(args: list[str], tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch) -> CliResult:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    (tmp_path / "slurm.conf").touch()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    return run_cli(["submit", "-m", "qwen3_tiny", *args], monkeypatch)


def _files_holding(text: str, *roots: Path) -> list[Path]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and text.encode() in path.read_bytes():
                found.append(path)
    return found


@pytest.mark.slow
def test_a_forwarded_secret_reaches_sbatch_by_name_and_is_written_nowhere(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = _fake_sbatch(tmp_path_factory.mktemp("stub"))
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.delenv("SBATCH_EXPORT", raising=False)
    result = _submit(["--env", "HF_TOKEN", "--env", "A=1"], tmp_path, stub, monkeypatch)
    assert result.exit_code == 0, result.output

    assert (stub / "token").read_text() == "reached\n"
    argv = (stub / "argv").read_text().splitlines()
    assert argv[0] == "--export=ALL,HF_TOKEN" and len(argv) == 2
    home = Path(os.environ["HYPERLAUNCH_HOME"])
    assert _files_holding(SECRET, home, tmp_path) == []
    assert SECRET not in result.output

    script = jobs.script_of("5151")
    assert "\nexport HF_TOKEN\n" in script and "\nexport A=1\n" in script
    record = json.loads((jobs.jobs_dir() / "5151" / jobs.RECORD_FILE).read_text())
    assert record["spec"]["env"] == [["HF_TOKEN", None], ["A", "1"]]
    assert jobs.load("5151").spec.job.env == (("HF_TOKEN", None), ("A", "1")), "the record reads back"


@pytest.mark.slow
def test_a_forwarded_name_that_is_not_set_is_a_one_line_error_and_nothing_is_written(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = _fake_sbatch(tmp_path_factory.mktemp("stub"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    result = _submit(["--env", "HF_TOKEN"], tmp_path, stub, monkeypatch)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "hyperlaunch: error: --env HF_TOKEN forwards HF_TOKEN from this environment, where it is not set "
        "(export HF_TOKEN before submitting, or pass --env HF_TOKEN=VALUE)"
    ]
    assert not (stub / "argv").exists(), "sbatch never ran"
    assert not jobs.jobs_dir().exists() or list(jobs.jobs_dir().rglob("*")) == []


@pytest.mark.slow
def test_render_shows_the_name_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    result = run_cli(["render", "-m", "qwen3_tiny", "--env", "HF_TOKEN"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "\nexport HF_TOKEN\n" in result.stdout and SECRET not in result.stdout


@pytest.mark.parametrize(
    ("sbatch_export", "flag"),
    [
        (None, "--export=ALL,HF_TOKEN,WANDB_API_KEY"),
        ("ALL", "--export=ALL,HF_TOKEN,WANDB_API_KEY"),
        ("NONE", "--export=HF_TOKEN,WANDB_API_KEY"),
        ("PATH,HF_TOKEN", "--export=PATH,HF_TOKEN,WANDB_API_KEY"),
    ],
)
def test_the_export_flag_adds_the_names_to_what_sbatch_would_export(sbatch_export: str | None, flag: str) -> None:
    """A command-line --export replaces SBATCH_EXPORT, so the user's choice is kept."""
    env = {} if sbatch_export is None else {"SBATCH_EXPORT": sbatch_export}
    assert slurm_submission.export_flag(["HF_TOKEN", "WANDB_API_KEY"], env) == [flag]
    assert slurm_submission.export_flag([], env) == [], "no forwarded name: sbatch as before"


@pytest.mark.slow
def test_a_forwarded_preset_variable_keeps_the_submitted_value_on_the_nodes(tmp_path: Path) -> None:
    """The p5 preset sets FI_EFA_USE_HUGE_PAGE; forwarding it must not be undone by the preset's export."""
    spec = build_spec(
        {"model": "qwen3_tiny", "instance_type": "p5.48xlarge", "env": ["FI_EFA_USE_HUGE_PAGE", "HF_TOKEN"], "hyperpod": "off", "torchrun": "torchrun"},
        cwd=tmp_path,
        environ={},
    )
    script = render_sbatch(spec)
    assert "FI_EFA_USE_HUGE_PAGE=" not in script and SECRET not in script
    run = run_script(script, tmp_path, env={"FI_EFA_USE_HUGE_PAGE": "1", "HF_TOKEN": SECRET})
    assert run.returncode == 0, run.stderr
    assert run.trainer is not None
    assert run.trainer["env"]["FI_EFA_USE_HUGE_PAGE"] == "1"
    assert run.trainer["env"]["HF_TOKEN"] == SECRET


def test_a_forwarded_name_round_trips_through_config_files(tmp_path: Path) -> None:
    (tmp_path / "hyperlaunch.toml").write_text('model = "qwen3_tiny"\nenv = ["HF_TOKEN", "B=2"]\n')
    spec = build_spec({"env": ["B=3"]}, cwd=tmp_path, environ={}, user_config=tmp_path / "none.toml")
    assert spec.job.env == (("HF_TOKEN", None), ("B", "3"))
    assert jobs.spec_from_json(json.loads(json.dumps(jobs.spec_to_json(spec)))) == spec
