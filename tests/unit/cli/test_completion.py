"""Shell completion as a shell runs it: the script `hyperlaunch completion bash` prints is
loaded into a real bash, whose completion function is called with COMP_WORDS and COMP_CWORD
set as bash sets them on TAB, and runs the CLI with every command built."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hyperlaunch.cli.completion import instance_types, model_presets, profiles, recorded_job_ids
from hyperlaunch.core.models import PRESETS
from hyperlaunch.core.paths import hyperlaunch_home
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.runs import jobs
from tests.support.cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[3]
BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="no bash")


def _record(tmp_path: Path, job_id: str, when: float) -> None:
    spec = job_spec(
        model="qwen3_tiny", nodes=1, checkpoint_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run")
    )
    jobs.save(jobs.JobRecord(job_id=job_id, spec=spec, submitted_at=when), "#!/bin/bash\n")


@pytest.fixture
def bash_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """TAB after `words` (the last one being completed, "" for a new word) in a bash that
    loaded the completion script; returns what bash would offer (COMPREPLY)."""
    script = run_cli(["completion", "bash"], monkeypatch)
    assert script.exit_code == 0, script.output
    script_file = tmp_path / "hyperlaunch.bash"
    script_file.write_text(script.stdout)
    # `hyperlaunch` on PATH runs this checkout's CLI, as the installed console script would.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "hyperlaunch"
    launcher.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m hyperlaunch "$@"\n')
    launcher.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }

    def complete(*words: str) -> list[str]:
        line = ["hyperlaunch", *words]
        program = (
            f"source {shlex.quote(str(script_file))}\n"
            # What bash does on TAB: run the function `complete -F` registered for the command,
            # with the words, the index of the one under the cursor, and (command, word, previous).
            'spec=$(complete -p hyperlaunch); func=${spec#*-F }; func=${func%% *}\n'
            f"COMP_WORDS=({' '.join(shlex.quote(w) for w in line)})\n"
            f"COMP_CWORD={len(line) - 1}\n"
            f'COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}\n'
            f'"$func" hyperlaunch {shlex.quote(line[-1])} {shlex.quote(line[-2])}\n'
            'printf "%s\\n" "${COMPREPLY[@]}"\n'
        )
        result = subprocess.run(
            [BASH, "--norc", "--noprofile", "-c", program], capture_output=True, text=True, env=env, check=False, timeout=60
        )
        assert result.returncode == 0 and not result.stderr, result.stderr
        return [line for line in result.stdout.splitlines() if line]

    return complete


@needs_bash
@pytest.mark.slow
def test_bash_completes_commands_options_presets_and_job_ids(bash_completes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _record(tmp_path, "4242", 2.0)
    _record(tmp_path, "977", 1.0)
    assert bash_completes("sub") == ["submit"]
    assert bash_completes("submit", "--mod") == ["--model", "--module"]
    qwen3 = sorted(name for name in PRESETS if name.startswith("qwen3_"))
    assert len(qwen3) >= 2 and sorted(bash_completes("submit", "--model", "qwen3_")) == qwen3
    assert bash_completes("status", "") == ["4242", "977"]
    assert bash_completes("logs", "42") == ["4242"]
    assert "exit-codes" in bash_completes("help", "")
    assert bash_completes("submit", "--instance-type", "ml.p5.") == ["ml.p5.48xlarge"]


@needs_bash
@pytest.mark.slow
def test_bash_offers_nothing_rather_than_an_error_where_values_are_unknown(bash_completes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # No records at all, a path for --model (bash's `-o default` then completes file names).
    assert bash_completes("cancel", "") == []
    assert bash_completes("submit", "--model", "./") == []


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_a_script_that_calls_hyperlaunch_back(shell: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli(["completion", shell], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "hyperlaunch" in result.stdout and "_HYPERLAUNCH_COMPLETE=complete_" + shell in result.stdout
    if shell == "zsh":
        assert result.stdout.startswith("#compdef hyperlaunch")


def test_completion_help_says_how_to_load_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    text = run_cli(["completion", "--help"], monkeypatch).stdout
    assert 'eval "$(hyperlaunch completion bash)"' in text
    assert "hyperlaunch completion bash > ~/.local/share/bash-completion/completions/hyperlaunch" in text


def test_zsh_and_click_style_requests_are_answered(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _record(tmp_path, "31", 1.0)
    monkeypatch.setenv("_HYPERLAUNCH_COMPLETE", "complete_zsh")
    monkeypatch.setenv("_TYPER_COMPLETE_ARGS", "hyperlaunch plot ")
    assert '"31"' in run_cli([], monkeypatch).stdout
    monkeypatch.setenv("_HYPERLAUNCH_COMPLETE", "bash_complete")  # Click's spelling
    monkeypatch.setenv("COMP_WORDS", "hyperlaunch resume ")
    monkeypatch.setenv("COMP_CWORD", "2")
    assert run_cli([], monkeypatch).stdout.split() == ["31"]


def test_value_completers_read_the_users_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hyperlaunch_home().mkdir(parents=True, exist_ok=True)
    (hyperlaunch_home() / "config.toml").write_text("[profile.mine]\nnodes = 2\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hyperlaunch.toml").write_text("nodes = 1\n[profile.hyperpod]\nnodes = 4\n[profile.mine]\nnodes = 3\n")
    assert profiles("") == ["mine", "hyperpod"]
    monkeypatch.setenv("_HYPERLAUNCH_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "hyperlaunch doctor --profile h")
    monkeypatch.setenv("COMP_CWORD", "3")
    assert run_cli([], monkeypatch).stdout.split() == ["hyperpod"]
    (tmp_path / "hyperlaunch.toml").write_text("not = [toml")
    with pytest.raises(ValueError):
        profiles("")
    broken = run_cli([], monkeypatch)  # what the shell gets then: nothing, and no traceback
    assert (broken.exit_code, broken.stdout.strip(), broken.stderr) == (0, "", "")
    assert "llama3_1_8b" in model_presets("ll") and model_presets("/fsx/models/") == []
    assert "p5.48xlarge" in instance_types("p5") and all(name.startswith("ml.") for name in instance_types("ml."))
    assert recorded_job_ids("") == []
