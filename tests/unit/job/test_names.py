"""First contact with names: instance types in any case, "did you mean" for a mistyped instance
type, model preset or profile, human --time forms, whole preset names in `models` at any
terminal width, and a checkpoint folder that is a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hyperlaunch.core.errors import ConfigError, InvalidInput
from hyperlaunch.core.instances import get_instance
from hyperlaunch.core.models import PRESETS, get_preset
from hyperlaunch.job.plan import build_spec
from hyperlaunch.script.render import render_sbatch
from tests.support.cli_runner import one_error_line, run_cli


def build(tmp_path: Path, **flags: object):
    return build_spec(flags, cwd=tmp_path, environ={}, user_config=tmp_path / "user.toml")


@pytest.mark.parametrize("typed", ["P5.48XLARGE", "ML.P5.48XLARGE", "ml.P5.48xlarge", "p5.48xlarge"])
def test_instance_types_are_case_insensitive_and_kept_lower_case(tmp_path: Path, typed: str) -> None:
    assert get_instance(typed).name == "p5.48xlarge"
    spec = build(tmp_path, model="qwen3_0_6b", instance_type=typed)
    assert spec.cluster.instance_type == "p5.48xlarge" and spec.cluster.gpus_per_node == 8


@pytest.mark.parametrize("typed", ["p5.48xlarg", "p5.4xlarge", "P5.48XLARG"])
def test_a_mistyped_instance_type_names_the_closest_and_lists_all(typed: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        get_instance(typed)
    assert f"unknown instance type {typed!r} (did you mean p5.48xlarge?); known: cpu, g5.xlarge" in str(raised.value)


def test_an_instance_type_like_none_suggests_nothing() -> None:
    with pytest.raises(InvalidInput) as raised:
        get_instance("zzzzzz")
    assert "did you mean" not in str(raised.value) and "known: cpu" in str(raised.value)


@pytest.mark.parametrize("typed", ["qwen3-0.6b", "qwen3_0.6b", "Qwen3-0.6B"])
def test_a_mistyped_model_preset_names_the_closest(tmp_path: Path, typed: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(f"unknown model {typed!r} (did you mean qwen3_0_6b?); presets: {', '.join(PRESETS)}")):
        build(tmp_path, model=typed)
    with pytest.raises(InvalidInput, match=re.escape(f"unknown model preset {typed!r} (did you mean qwen3_0_6b?); presets: ")):
        get_preset(typed)


def test_an_unknown_profile_lists_the_profiles_and_names_the_closest(tmp_path: Path) -> None:
    (tmp_path / "hyperlaunch.toml").write_text('model = "qwen3_tiny"\n[profile.hyperpod]\nnodes = 2\n[profile.gpu]\nnodes = 3\n')
    (tmp_path / "user.toml").write_text('[profile.mine]\nqos = "low"\n')
    with pytest.raises(ConfigError) as raised:
        build_spec({}, cwd=tmp_path, environ={}, user_config=tmp_path / "user.toml", profile="hyperpd")
    message = str(raised.value)
    assert message.startswith("profile 'hyperpd' is not defined in ")
    assert message.endswith("(did you mean 'hyperpod'?); profiles there: 'mine', 'hyperpod', 'gpu'")


def test_an_unknown_profile_where_none_is_defined_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"profile 'gpu' is not defined in .*; no \[profile.NAME\] there"):
        build_spec({}, cwd=tmp_path, environ={}, user_config=tmp_path / "user.toml", profile="gpu")


@pytest.mark.parametrize(
    ("typed", "slurm"),
    [("4h", "0-04:00:00"), ("90m", "0-01:30:00"), ("2d", "2-00:00:00"), ("1d12h", "1-12:00:00"), ("36h", "1-12:00:00"),
     ("1h30m", "0-01:30:00"), ("4H", "0-04:00:00"), ("4:00:00", "4:00:00"), ("2-00:00:00", "2-00:00:00"), ("UNLIMITED", "UNLIMITED")],
)
def test_human_times_become_slurm_times_in_the_spec_and_the_script(tmp_path: Path, typed: str, slurm: str) -> None:
    spec = build(tmp_path, model="qwen3_tiny", time=typed)
    assert spec.cluster.time == slurm
    assert f"#SBATCH --time={slurm}\n" in render_sbatch(spec)


@pytest.mark.parametrize("typed", ["four hours", "4h 30m", "10m4h", "h", "4x", "4hh", "1.5h", "\u0664h"])
def test_other_times_are_refused_with_the_accepted_forms(tmp_path: Path, typed: str) -> None:
    with pytest.raises(InvalidInput, match=r"is not a Slurm time: use M, H:M:S, D-H, D-H:M:S, UNLIMITED, or 4h, 90m, 2d, 1d12h, 30s$"):
        build(tmp_path, model="qwen3_tiny", time=typed)


def test_a_human_time_is_still_checked_against_the_save_signal(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="leaves no time to train within --time 0-00:02:00"):
        build(tmp_path, model="qwen3_tiny", time="2m")


def _models_on_a_terminal(monkeypatch: pytest.MonkeyPatch, columns: int, *args: str) -> str:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich takes stdout for a terminal, COLUMNS wide
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("NO_COLOR", "1")
    result = run_cli(["models", *args], monkeypatch)
    assert result.exit_code == 0, result.output
    return re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_models_shows_whole_names_and_fits_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    text = _models_on_a_terminal(monkeypatch, columns)
    assert "…" not in text
    for name in PRESETS:
        assert re.search(rf"│ {name} +│", text), name
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80


@pytest.mark.parametrize("wide", [False, True])
def test_a_terminal_too_narrow_for_the_table_wraps_lines_and_cuts_nothing(monkeypatch: pytest.MonkeyPatch, wide: bool) -> None:
    text = _models_on_a_terminal(monkeypatch, 40, *(["--wide"] if wide else []))
    assert "…" not in text
    for name in PRESETS:
        assert re.search(rf"│ {name} +│", text), name


def test_models_wide_shows_what_the_default_view_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    default = _models_on_a_terminal(monkeypatch, 250)
    wide = _models_on_a_terminal(monkeypatch, 250, "--wide")
    for header in ("non-emb params", "head dim", "mlp", "tied", "rope theta", "rope scaling", "norm eps", "max positions",
                   "on CPU", "sharding", "offload", "ckpt every", "val every", "tokenizer", "description"):
        assert header in wide and header not in default, header
    for value in ("rope_type=llama3", "meta-llama/Llama-3.1-8B", "Tiny Llama", "131072", "1e-06"):
        assert value in wide and value not in default, value
    assert "…" not in wide


def test_a_checkpoint_folder_that_is_a_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").write_text("not a folder")
    result = run_cli(["checkpoints", "--checkpoint-dir", "ckpt"], monkeypatch)
    one_error_line(result, 2, f"checkpoint folder {tmp_path / 'ckpt'} is not a folder")
    assert result.stdout == ""
    # A folder that is not there yet is still only a warning: no job has saved yet.
    assert run_cli(["checkpoints", "--checkpoint-dir", "none-yet"], monkeypatch).exit_code == 0
