"""`hyperlaunch export --slurm`'s batch script: a golden file, values quoted (a path with a space
and a quote stays one word), bash -n and shellcheck clean."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hyperlaunch.script.render_export import render_export

GOLDEN = Path(__file__).parents[1] / "golden" / "export.sbatch"
CHECKPOINT = "/fsx/team's ckpt/qwen3_0_6b-2000steps"


def _script() -> str:
    return render_export(
        command=["/fsx/venvs/hl/bin/python", "-m", "hyperlaunch.train.hf_export", "--checkpoint", CHECKPOINT, "--output", "/fsx/eval/step 2000", "--dtype", "bf16"],
        checkpoint=CHECKPOINT, job_name="export-qwen3_0_6b-2000steps", log="/fsx/team's ckpt/logs/export-%j.out", partition="cpu", time="0-01:00:00",
    )


def test_golden() -> None:
    rendered = _script().replace("0.1.0", "VERSION")
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(rendered)
    assert rendered == GOLDEN.read_text(), "changed; if intended: UPDATE_GOLDEN=1 pytest tests/unit/script/test_render_export.py"


@pytest.mark.slow
def test_the_command_reaches_the_exporter_word_for_word(tmp_path: Path) -> None:
    script = tmp_path / "export.sh"
    script.write_text(_script().replace("exec /fsx/venvs/hl/bin/python", "exec printf '%s\\n'"))
    words = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert words[words.index("--checkpoint") + 1] == CHECKPOINT and words[words.index("--output") + 1] == "/fsx/eval/step 2000"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    assert subprocess.run(["shellcheck", "--shell=bash", str(script)], capture_output=True).returncode == 0
