"""Names the job script depends on: every variable the batch script or the step script reads
or exports is in hyperlaunch.core.script_env's reserved list (found by scanning the templates and
the rendered scripts, so a new name in a template fails here until it is listed), and `--env`
refuses each of them through every channel, in one line naming the rule."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from hyperlaunch.core import script_env, trackers, trainer_failures
from hyperlaunch.core.instances import get_instance
from hyperlaunch.core.script_env import NAMES_READ_AS_GIVEN, RESERVED_ENV_NAMES, RESERVED_ENV_RULE
from hyperlaunch.job.plan import build_spec
from hyperlaunch.script.render import render_sbatch
from tests.support.cli_runner import run_cli

# $NAME, ${NAME...}, `export NAME`, and bare names inside $(( ... )) arithmetic.
_EXPANDED = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_EXPORTED = re.compile(r"\bexport\s+([A-Za-z_][A-Za-z0-9_]*)")
_ARITHMETIC = re.compile(r"\$\(\((.*?)\)\)", re.S)
_IDENTIFIER = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\b")


def _names_used(text: str) -> set[str]:
    names = set(_EXPANDED.findall(text)) | set(_EXPORTED.findall(text))
    for expression in _ARITHMETIC.findall(text):
        names |= set(_IDENTIFIER.findall(expression))
    # Script-local variables are lowercase by the templates' convention; `_` is bash's own.
    return {name for name in names if name != name.lower()}


# doctor's script for the compute nodes, not part of a job: no `--env` reaches it.
_NOT_THE_JOB = frozenset({"node_probe.sh.j2"})


def _templates() -> dict[str, str]:
    root = resources.files("hyperlaunch.templates")
    found = {}
    for entry in [root, root.joinpath("partials")]:
        for item in entry.iterdir():
            if item.name.endswith(".j2") and item.name not in _NOT_THE_JOB:
                found[item.name] = item.read_text(encoding="utf-8")
    return found


# The supervisor reads the job's environment in Python: `environ.get("NAME"` and `environ["NAME"]`.
_READ_IN_PYTHON = re.compile(r"""environ(?:\.get\(|\[)["']([A-Za-z_][A-Za-z0-9_]*)["']""")


# ... and sets the step's: `env[CONSTANT] = ...`, the constants of script_env and trainer_failures.
_SET_IN_PYTHON = re.compile(r"\benv\[([A-Z_]+)\] =")


def _supervisor_names() -> set[str]:
    root = resources.files("hyperlaunch.supervisor")
    found: set[str] = set()
    for item in root.iterdir():
        if item.name.endswith(".py"):
            text = item.read_text(encoding="utf-8")
            found |= set(_READ_IN_PYTHON.findall(text))
            found |= {getattr(script_env, name, None) or getattr(trackers, name, None) or getattr(trainer_failures, name) for name in _SET_IN_PYTHON.findall(text)}
    return found


def test_every_name_the_supervisor_reads_is_reserved() -> None:
    assert {"SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST", "HYPERLAUNCH_ROUND", "HYPERLAUNCH_TRAINER_FAILURE_FILE"} <= _supervisor_names()
    assert not _supervisor_names() - RESERVED_ENV_NAMES - set(NAMES_READ_AS_GIVEN)


def test_the_scanner_sees_the_names_of_the_issue() -> None:
    used = set().union(*(_names_used(text) for text in _templates().values())) | _supervisor_names()
    assert {"SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_LAUNCH_NODE_IPADDR"} <= used


def test_every_name_the_templates_read_or_export_is_reserved() -> None:
    for name, text in _templates().items():
        missing = _names_used(text) - RESERVED_ENV_NAMES - set(NAMES_READ_AS_GIVEN)
        assert not missing, f"templates/{name} uses {sorted(missing)}: add them to hyperlaunch/core/script_env.py"


@pytest.mark.parametrize(
    "flags",
    [
        {"model": "qwen3_tiny", "nodes": 2},
        {"model": "qwen3_0_6b", "instance_type": "p5.48xlarge", "hyperpod": "auto"},
        {"model": "qwen3_0_6b", "instance_type": "p4d.24xlarge", "container_image": "/fsx/i.sqsh", "hyperpod": "on"},
    ],
)
def test_every_name_the_rendered_script_reads_or_exports_is_reserved_or_a_preset(flags: dict[str, object], tmp_path: Path) -> None:
    """Names Python hands the template (the launcher's exports, the trainer-failure file) are
    only visible once rendered. The instance presets are data meant to be overridden."""
    spec = build_spec(flags, cwd=tmp_path, environ={})
    instance = get_instance(spec.cluster.instance_type)
    preset = set(dict(instance.env)) | set(dict(instance.container_env))
    missing = _names_used(render_sbatch(spec)) - RESERVED_ENV_NAMES - preset - set(NAMES_READ_AS_GIVEN)
    assert not missing, f"the script uses {sorted(missing)}: add them to hyperlaunch/core/script_env.py"


def test_the_list_is_exactly_the_scripts_names_and_the_shells() -> None:
    used: set[str] = set().union(*(_names_used(text) for text in _templates().values())) | _supervisor_names()
    spec = build_spec({"model": "qwen3_tiny"}, cwd=Path("/tmp"), environ={})
    used |= _names_used(render_sbatch(spec)) - set(dict(get_instance(spec.cluster.instance_type).env))
    tracked = build_spec({"model": "qwen3_tiny", "tracker": ("tensorboard",)}, cwd=Path("/tmp"), environ={}).replace(tracker_run_id="abc")
    used |= _names_used(render_sbatch(tracked)) - set(dict(get_instance(spec.cluster.instance_type).env))
    assert RESERVED_ENV_NAMES == used - set(NAMES_READ_AS_GIVEN) | {"BASH_ENV", "ENV", "IFS"}


def _refused(result_stderr: str, name: str) -> None:
    lines = result_stderr.strip().splitlines()
    assert len(lines) == 1, result_stderr
    assert f"--env {name} is refused" in lines[0] and RESERVED_ENV_RULE in lines[0]


@pytest.mark.parametrize("name", sorted(RESERVED_ENV_NAMES))
@pytest.mark.parametrize("form", ["{}=0", "{}"])
@pytest.mark.slow
def test_each_reserved_name_is_refused_on_the_command_line(name: str, form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli(["render", "-m", "qwen3_tiny", "--env", form.format(name)], monkeypatch)
    assert result.exit_code == 2
    assert result.stdout == ""
    _refused(result.stderr, name)


@pytest.mark.parametrize(
    "config",
    [
        '[env]\nSLURM_RESTART_COUNT = "0"\n',
        'env = ["BASH_ENV=/tmp/x"]\n',
        '[profile.p]\nenv = ["IFS"]\n',
    ],
)
@pytest.mark.slow
def test_reserved_names_are_refused_from_config_files_and_profiles(config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hyperlaunch.toml").write_text('model = "qwen3_tiny"\n' + config)
    args = ["render"] + (["--profile", "p"] if "profile" in config else [])
    result = run_cli(args, monkeypatch)
    assert result.exit_code == 2, result.output
    name = re.search(r"(SLURM_RESTART_COUNT|BASH_ENV|IFS)", config).group(1)  # type: ignore[union-attr]
    _refused(result.stderr, name)


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "NCCL_DEBUG", "HF_TOKEN", "slurm_job_id", "SLURM_CPUS_PER_TASK"])
@pytest.mark.slow
def test_other_names_stay_allowed(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli(["render", "-m", "qwen3_tiny", "--env", f"{name}=/x"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert f"export {name}=/x\n" in result.stdout


def test_the_rule_is_in_the_env_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "2000")
    result = run_cli(["render", "--help"], monkeypatch)
    assert result.exit_code == 0
    flat = " ".join(result.stdout.split())
    assert "PATH and LD_* are allowed" in flat
    for name in RESERVED_ENV_NAMES:
        assert name in flat


@pytest.mark.slow
def test_an_env_name_with_a_trailing_newline_is_not_a_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli(["render", "-m", "qwen3_tiny", "--env", "HF_HOME\n=x"], monkeypatch)
    assert result.exit_code == 2
    assert "not a valid variable name" in result.stderr and len(result.stderr.strip().splitlines()) == 1
