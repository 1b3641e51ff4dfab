"""The supervisor as the job runs it: a zipapp of itself and the core modules it reads, written
into the run folder at submit under a name that is the hash of its bytes, runnable on a bare
python3 of 3.8 or later (vermin reads it for anything newer; an interpreter that sees no
site-packages runs it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs import submission
from hyperlaunch.script import supervisor_bundle
from hyperlaunch.script.render import render_sbatch
from hyperlaunch.supervisor import MIN_PYTHON

ROOT = Path(__file__).resolve().parents[3]


def _spec(tmp_path: Path) -> JobSpec:
    return job_spec(
        model="qwen3_tiny", torchrun="torchrun", checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run")
    )


def test_the_bundle_is_the_same_bytes_every_time_and_named_by_them() -> None:
    supervisor_bundle.bundle_bytes.cache_clear()
    first = supervisor_bundle.bundle_bytes()
    supervisor_bundle.bundle_bytes.cache_clear()
    assert supervisor_bundle.bundle_bytes() == first
    assert supervisor_bundle.bundle_path("/fsx/run/") == f"/fsx/run/.hyperlaunch/{supervisor_bundle.bundle_name()}"


def test_the_script_runs_the_bundle_from_the_run_folder(tmp_path: Path) -> None:
    script = render_sbatch(_spec(tmp_path))
    assert f"exec python3 {supervisor_bundle.bundle_path(str(tmp_path / 'run'))} \\\n" in script


@pytest.mark.slow
def test_the_bundled_code_passes_a_python_38_compatibility_check(tmp_path: Path) -> None:
    """Annotations are not evaluated at run time (`from __future__ import annotations`), so
    vermin reads without --eval-annotations here: what runs must run on 3.8."""
    assert importlib.util.find_spec("vermin"), "vermin is not installed: `make setup` installs the test extra"
    with zipfile.ZipFile(_write(tmp_path)) as archive:
        archive.extractall(tmp_path / "unpacked")
    target = ".".join(map(str, MIN_PYTHON))
    result = subprocess.run(
        [sys.executable, "-c", "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())", f"-t={target}-", "--no-tips", "--violations", str(tmp_path / "unpacked")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "supervisor.pyz"
    path.write_bytes(supervisor_bundle.bundle_bytes())
    return path


@pytest.mark.slow
def test_the_bundle_runs_on_an_interpreter_that_sees_nothing_but_the_standard_library(tmp_path: Path) -> None:
    bundle = _write(tmp_path)
    # -I: no user site, no PYTHON* variables, no working folder on sys.path; -S: no site-packages.
    imports = "; ".join(f"import {name}" for name in _bundled_modules(torch=False))
    probe = f"import sys; sys.path.insert(0, {str(bundle)!r}); {imports}; import hyperlaunch; print(hyperlaunch.__file__)"
    result = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(bundle)), "imported from elsewhere than the bundle"
    result = subprocess.run([sys.executable, "-I", "-S", str(bundle), "--run-dir", "x"], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert result.returncode != 0 and "no launch command: pass it after --" in result.stderr


def _bundled_modules(torch: bool = True) -> list[str]:
    names = []
    for name in supervisor_bundle.BUNDLED_MODULES:
        if not torch and name in supervisor_bundle.NEEDS_TORCH:
            continue
        module = "hyperlaunch." + name[: -len(".py")].replace("/", ".")
        names.append(module.removesuffix(".__init__"))
    return [name for name in names if not name.endswith("__main__")]


@pytest.mark.slow
def test_every_module_the_supervisor_imports_is_bundled() -> None:
    """The modules of hyperlaunch an import of the supervisor, of the runtime library (which
    script jobs import from the bundle, its memory snapshots too), of the frameworks' callbacks
    beside it and of the trackers it forwards to loads are exactly the bundled ones."""
    probe = (
        "import sys\n"
        "import hyperlaunch.supervisor.attempt\n"
        "import hyperlaunch.runtime\n"
        "import hyperlaunch.runtime.snapshots\n"
        "import hyperlaunch.trackers\n"
        "import hyperlaunch.integrations.transformers, hyperlaunch.integrations.lightning\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('hyperlaunch.'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert set(result.stdout.split()) == set(_bundled_modules())


def test_submit_writes_the_bundle_before_sbatch_and_removes_it_when_slurm_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path)
    bundle = Path(supervisor_bundle.bundle_path(spec.output.run_dir))
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    seen: list[bool] = []

    def refuse(script: str, folder: Path, **kwargs: object) -> str:
        seen.append(bundle.is_file())
        raise RuntimeError("sbatch: error: Batch job submission failed")

    monkeypatch.setattr(submission.slurm_submission, "submit_script", refuse)
    with pytest.raises(RuntimeError):
        submission.submit(spec, render_sbatch(spec), env=dict(os.environ))
    assert seen == [True] and not bundle.exists() and not bundle.parent.exists()

    monkeypatch.setattr(submission.slurm_submission, "submit_script", lambda script, folder, **kwargs: "77")
    record = submission.submit(spec, render_sbatch(spec), env=dict(os.environ))
    assert record.job_id == "77" and bundle.read_bytes() == supervisor_bundle.bundle_bytes()
