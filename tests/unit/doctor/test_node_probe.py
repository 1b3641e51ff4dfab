"""doctor's probe of the compute nodes without a cluster: the node-side script run with bash
here (as srun would run it on a node), the parsing and judging of its JSON lines, the srun
step's bounds (faked at hyperlaunch.slurm.runner.run), and the CLI with stand-in Slurm commands."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperlaunch import __version__
from hyperlaunch.core.errors import SlurmError
from hyperlaunch.doctor import node_probe
from hyperlaunch.doctor.node_probe import JobSide, NodeReport, ProbeResult, choose_nodes, judge, parse_reports, summary
from hyperlaunch.script.render import render_node_probe
from hyperlaunch.slurm import nodes as slurm_nodes
from hyperlaunch.slurm import runner as slurm_runner
from hyperlaunch.supervisor import MIN_PYTHON, PYTHON

REPO = Path(__file__).resolve().parents[3]
HEALTHY = NodeReport(
    node="ip-10-1-38-128", hostname="ip-10-1-38-128", gpus=8, gpu_source="nvidia-smi", efa="rdmap16s27,rdmap32s27",
    pyxis="/opt/slurm/etc/plugstack.conf.d/pyxis.conf", enroot="/usr/bin/enroot",
    nccl_net="/opt/amazon/ofi-nccl/lib/libnccl-net.so", torchrun="/fsx/venv/bin/torchrun", python="/fsx/venv/bin/python3",
    python_version="3.12.3", hyperlaunch=__version__, torch="2.7.1", transformers="4.56.1", system_python="/usr/bin/python3",
    system_python_version="3.10.12", hyperpod=True,
)
JOB = JobSide(torchrun="/fsx/venv/bin/torchrun", local_names=frozenset({"login1", "10.1.0.5"}), task_plugin="task/none")


def run_probe_script(tmp_path: Path, torchrun: str, **env: str) -> list[NodeReport]:
    """The node-side script, run with bash on this machine as srun runs it on a node."""
    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(REPO), **env}
    result = subprocess.run(
        ["bash", "-c", render_node_probe(), "hyperlaunch-probe", torchrun],
        capture_output=True, text=True, env=environ, cwd=tmp_path, timeout=60, check=True,
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    return parse_reports(result.stdout)


def path_without_python(tmp_path: Path) -> str:
    """A PATH holding only the tools the script runs, linked one by one: no python3 on it."""
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    for name in ("bash", "tr", "sed", "grep", "readlink", "timeout", "hostname", "tail"):
        found = shutil.which(name)
        assert found is not None, name
        if not (tools / name).exists():
            (tools / name).symlink_to(found)
    return str(tools)


def fake_torchrun(folder: Path, first_lines: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "torchrun"
    path.write_text(first_lines + "\nimport sys\n")
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------- the node-side script


@pytest.mark.slow
def test_the_script_reports_the_python_that_torchrun_runs_on(tmp_path: Path) -> None:
    torchrun = fake_torchrun(tmp_path / "venv" / "bin", f"#!{sys.executable}")
    plugin_dir = tmp_path / "ofi"
    plugin_dir.mkdir()
    (plugin_dir / "libnccl-net.so").write_bytes(b"")
    # A hyperlaunch folder in the working directory must not be what the probe imports.
    (tmp_path / "hyperlaunch").mkdir()
    (tmp_path / "hyperlaunch" / "__init__.py").write_text("__version__ = 'shadow'\n")
    [report] = run_probe_script(tmp_path, str(torchrun), SLURMD_NODENAME="node7", LD_LIBRARY_PATH=f"/nowhere:{plugin_dir}")
    assert report.node == "node7" and report.torchrun == str(torchrun) and report.python == sys.executable
    assert report.python_version == "%d.%d.%d" % sys.version_info[:3]  # noqa: UP031  (assertions stay as written)
    assert report.hyperlaunch == __version__ and report.python_error == ""
    from importlib import metadata

    assert report.transformers == metadata.version("transformers")
    assert report.nccl_net == f"{plugin_dir}/libnccl-net.so"
    assert report.hyperpod is False and report.gpus == 0
    verdict = judge(report, JobSide(torchrun=str(torchrun)))
    assert verdict.status in ("pass", "fail")  # torch may be missing from the test's Python


@pytest.mark.slow
def test_env_and_pip_long_path_shebangs_are_followed(tmp_path: Path) -> None:
    python_dir = Path(sys.executable).parent
    env_style = fake_torchrun(tmp_path / "a", f"#!/usr/bin/env {Path(sys.executable).name}")
    [report] = run_probe_script(tmp_path, str(env_style), PATH=f"{python_dir}:/usr/bin:/bin")
    assert report.python == Path(sys.executable).name and report.python_version
    long_style = fake_torchrun(tmp_path / "b", f"#!/bin/sh\n'''exec' {sys.executable} \"$0\" \"$@\"\n' '''")
    [report] = run_probe_script(tmp_path, str(long_style))
    assert report.python == sys.executable and report.hyperlaunch == __version__


@pytest.mark.slow
def test_a_missing_torchrun_or_a_broken_python_is_reported(tmp_path: Path) -> None:
    [missing] = run_probe_script(tmp_path, "/not/shared/venv/bin/torchrun")
    assert missing.torchrun == "" and missing.python == ""
    broken = fake_torchrun(tmp_path / "v", f"#!{tmp_path}/gone/python3")
    [report] = run_probe_script(tmp_path, str(broken))
    assert report.torchrun == str(broken) and report.python == f"{tmp_path}/gone/python3"
    assert report.python_version == "" and "exit status 127" in report.python_error
    assert judge(report, JobSide(torchrun=str(broken))).status == "fail"


@pytest.mark.slow
def test_the_script_writes_valid_json_whatever_the_names(tmp_path: Path) -> None:
    odd = 'n"o\\de\tx'
    [report] = run_probe_script(tmp_path, "", SLURMD_NODENAME=odd)
    assert report.node == 'n"o\\de x'


@pytest.mark.slow
def test_pyxis_is_found_in_the_clusters_plugstack(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "plugstack.conf.d").mkdir(parents=True)
    (etc / "plugstack.conf.d" / "pyxis.conf").write_text("required /usr/lib/slurm/spank_pyxis.so\n")
    [report] = run_probe_script(tmp_path, "", SLURM_CONF=str(etc / "slurm.conf"))
    assert report.pyxis == f"{etc}/plugstack.conf.d/pyxis.conf"


OLD_PYTHON = "%d.%d.9" % (MIN_PYTHON[0], MIN_PYTHON[1] - 1)  # noqa: UP031  (the minimum's predecessor)


@pytest.mark.parametrize(
    ("stub", "version", "error", "words"),
    [
        (None, "", "", f"no {PYTHON} on PATH: the job's supervisor runs on the batch host's {PYTHON}"),
        (f'[ "$1" = -c ] || exit 9\necho {OLD_PYTHON}', OLD_PYTHON, "", f"{OLD_PYTHON} at "),
        ("echo 'error while loading shared libraries: libpython3.so' >&2\nexit 127", "", "libpython3.so (exit status 127)", "fails here"),
    ],
    ids=["missing", "too-old", "broken"],
)
@pytest.mark.slow
def test_the_script_reports_the_nodes_python3_and_judge_fails_a_bad_one(
    tmp_path: Path, stub: str | None, version: str, error: str, words: str
) -> None:
    path = path_without_python(tmp_path)
    if stub is not None:
        (tmp_path / "stub").mkdir()
        (tmp_path / "stub" / PYTHON).write_text(f"#!/bin/sh\n{stub}\n")
        (tmp_path / "stub" / PYTHON).chmod(0o755)
        path = f"{tmp_path / 'stub'}:{path}"
    [report] = run_probe_script(tmp_path, "", PATH=path)
    assert report.system_python == ("" if stub is None else str(tmp_path / "stub" / PYTHON))
    assert report.system_python_version == version and report.system_python_error.endswith(error)
    # A container job still needs it: the supervisor runs outside the container.
    verdict = judge(report, JobSide(torchrun="", container_image="/fsx/img.sqsh"))
    minimum = ".".join(map(str, MIN_PYTHON))
    assert verdict.status == "fail" and len(verdict.findings) == 1, verdict
    assert words in verdict.findings[0] and f"({minimum} or later)" in verdict.findings[0]


@pytest.mark.slow
def test_the_script_reports_a_real_python3_and_judge_passes_it(tmp_path: Path) -> None:
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / PYTHON).symlink_to(sys.executable)
    [report] = run_probe_script(tmp_path, "", PATH=f"{tmp_path / 'py'}:{path_without_python(tmp_path)}")
    assert report.system_python == str(tmp_path / "py" / PYTHON) and report.system_python_error == ""
    assert report.system_python_version == "%d.%d.%d" % sys.version_info[:3]  # noqa: UP031  (as the script prints it)
    assert judge(report, JobSide(torchrun="", container_image="/fsx/img.sqsh")).status == "pass"


def test_the_script_passes_shellcheck(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    path = tmp_path / "probe.sh"
    path.write_text(render_node_probe())
    result = subprocess.run(["shellcheck", "--shell=bash", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


# ---------------------------------------------------------------- parsing and judging


def test_parse_keeps_reports_and_skips_everything_else() -> None:
    good = json.dumps({"probe": 1, "node": "n1", "gpus": 8, "efa": "rdmap0", "hyperpod": True})
    text = "\n".join(
        [
            "srun: warning: something",
            good,
            "{not json",
            json.dumps({"node": "n2"}),  # no probe field: not a report
            json.dumps({"probe": 1, "node": "n3", "gpus": True, "torch": 2}),  # wrong types dropped
            json.dumps([1, 2]),
        ]
    )
    reports = {r.node: r for r in parse_reports(text)}
    assert set(reports) == {"n1", "n3"}
    assert reports["n1"].gpus == 8 and reports["n1"].efa == "rdmap0" and reports["n1"].hyperpod is True
    assert reports["n3"].gpus == 0 and reports["n3"].torch == ""


def test_only_idle_nodes_of_the_partition_are_chosen() -> None:
    rows = [
        slurm_nodes.PartitionNode("node1", "idle", "dev", True),
        slurm_nodes.PartitionNode("node2", "allocated", "dev", True),
        slurm_nodes.PartitionNode("node3", "idle~", "dev", True),
        slurm_nodes.PartitionNode("node4", "down*", "dev", True),
        slurm_nodes.PartitionNode("gpu1", "idle", "gpu", False),
    ]
    assert choose_nodes(rows, None) == ("dev", ["node1"], [("node2", "allocated"), ("node3", "idle~"), ("node4", "down*")])
    assert choose_nodes(rows, "gpu") == ("gpu", ["gpu1"], [])
    assert choose_nodes(rows[4:], None) == (None, [], [])


def test_a_healthy_hyperpod_node_passes() -> None:
    assert judge(HEALTHY, JOB).status == "pass" and judge(HEALTHY, JOB).findings == ()


@pytest.mark.parametrize(
    ("change", "job_change", "status", "words"),
    [
        ({"torchrun": "", "python": "", "python_version": ""}, {}, "fail", "/fsx"),
        ({"python_version": "", "python_error": "No module named encodings"}, {}, "fail", "No module named encodings"),
        ({"hyperlaunch": ""}, {}, "fail", "cannot import hyperlaunch"),
        ({"hyperlaunch": "0.0.1"}, {}, "warn", f"hyperlaunch 0.0.1 on the node, {__version__} here"),
        ({"torch": ""}, {}, "fail", "no torch"),
        ({"transformers": ""}, {}, "warn", "no transformers: the bundled trainer cannot start (pip install 'hyperlaunch[train]'"),
        ({"nccl_net": ""}, {}, "warn", "TCP sockets"),
        ({"enroot": ""}, {}, "warn", "enroot"),
        ({}, {"task_plugin": "task/cgroup,task/affinity"}, "warn", "auto-resume needs task/none"),
        ({"node": "login1"}, {}, "warn", "login node"),
        ({"system_python": "", "system_python_version": ""}, {}, "fail", "no python3 on PATH: the job's supervisor"),
        ({"system_python_version": "3.7.17"}, {}, "fail", "python3 3.7.17 at /usr/bin/python3 is too old"),
        ({"system_python_version": "2.7.18"}, {}, "fail", "(3.8 or later)"),
        ({"system_python_version": "", "system_python_error": "no answer within 30 s"}, {}, "fail", "no answer within 30 s"),
        ({"system_python_version": "Python 3.12"}, {}, "fail", "printed 'Python 3.12', not a version"),
    ],
)
def test_each_problem_is_named_with_what_to_do(change: dict, job_change: dict, status: str, words: str) -> None:
    report = dataclasses.replace(HEALTHY, **change)
    job = dataclasses.replace(JOB, **job_change)
    verdict = judge(report, job)
    assert verdict.status == status and len(verdict.findings) == 1 and words in verdict.findings[0], verdict


def test_a_job_in_a_container_is_not_judged_by_the_hosts_python() -> None:
    report = dataclasses.replace(HEALTHY, torchrun="", python="", python_version="")
    assert judge(report, JobSide(torchrun="", container_image="/fsx/img.sqsh")).status == "pass"


@pytest.mark.parametrize("version", ["3.8.0", "3.13.1", "4.0.0"])
def test_the_minimum_python3_and_newer_pass(version: str) -> None:
    assert judge(dataclasses.replace(HEALTHY, system_python_version=version), JOB).findings == ()


def test_a_report_without_the_python3_fields_still_parses() -> None:
    [report] = parse_reports(json.dumps({"probe": 1, "node": "n1", "torch": "2.7.1"}))
    assert report.system_python == report.system_python_version == report.system_python_error == ""


def test_the_summary_fails_with_a_failing_node_and_names_skipped_ones() -> None:
    good = judge(dataclasses.replace(HEALTHY, node="n1"), JOB)
    bad = judge(dataclasses.replace(HEALTHY, node="n2", hyperlaunch=""), JOB)
    result = ProbeResult(partition="p5", probed=("n1", "n2", "n3"), verdicts=(good, bad), skipped=(("n4", "allocated"),))
    check = summary(result)
    assert check.status == "fail" and check.hint.startswith("n2: ") and "cannot import hyperlaunch" in check.hint
    assert "1 pass, 1 fail" in check.detail and "no report from n3" in check.detail and "n4 (allocated)" in check.detail
    assert result.to_json()["silent"] == ["n3"] and result.to_json()["nodes"][1]["status"] == "fail"


def test_the_summary_warns_without_idle_nodes_or_when_srun_fails() -> None:
    none_idle = summary(ProbeResult(partition="dev", skipped=(("node1", "mixed"),)))
    assert none_idle.status == "warn" and "no idle node" in none_idle.detail and "node1 (mixed)" in none_idle.detail
    refused = summary(ProbeResult(partition="dev", probed=("node1",), error="srun: error: Unable to allocate resources"))
    assert refused.status == "warn" and "Unable to allocate" in refused.detail and "--no-probe" in refused.hint
    ok = summary(ProbeResult(partition="dev", probed=(HEALTHY.node,), verdicts=(judge(HEALTHY, JOB),)))
    assert ok.status == "pass" and ok.detail == "1 idle node(s) of partition dev probed: 1 pass"


# ---------------------------------------------------------------- the srun step


class FakeSlurm:
    """sinfo with `sinfo` lines; srun answering `srun` (or raising SlurmError: timed out)."""

    def __init__(self, sinfo: str, srun: slurm_runner.Result | None) -> None:
        self.sinfo, self.srun, self.calls = sinfo, srun, []

    def __call__(self, args: Sequence[str], **kwargs: object) -> slurm_runner.Result:
        self.calls.append((tuple(args), kwargs))
        if args[0] == "sinfo":
            return slurm_runner.Result(tuple(args), 0, self.sinfo, "")
        if args[0] == "srun":
            if self.srun is None:
                raise SlurmError(f"{' '.join(args[:2])} did not answer within {kwargs['timeout']:.0f} s")
            return self.srun
        return slurm_runner.Result(tuple(args), 0, "", "")


SINFO = "node1|idle|dev*\nnode2|allocated|dev*\nnode3|idle|dev*\ngpu1|idle|gpu\n"


def test_the_step_is_bounded_and_runs_once_on_the_idle_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = "\n".join(json.dumps({**dataclasses.asdict(HEALTHY), "probe": 1, "node": n}) for n in ("node3", "node1"))
    fake = FakeSlurm(SINFO, slurm_runner.Result(("srun",), 0, lines + "\n", ""))
    monkeypatch.setattr(slurm_runner, "run", fake)
    notes: list[str] = []
    result = node_probe.probe_partition({}, partition=None, job=JOB, progress=notes.append)
    [(srun, kwargs)] = [call for call in fake.calls if call[0][0] == "srun"]
    assert {"--partition=dev", "--nodes=2", "--nodelist=node1,node3", "--ntasks-per-node=1", "--time=1"} <= set(srun)
    assert any(arg.startswith("--immediate=") for arg in srun) and float(kwargs["timeout"]) <= 120  # type: ignore[arg-type]
    assert srun[-2:] == ("hyperlaunch-probe", JOB.torchrun) and srun[-5:-3] == ("bash", "-c")
    assert [v.report.node for v in result.verdicts] == ["node1", "node3"] and result.skipped == (("node2", "allocated"),)
    assert notes == [f"probing 2 idle node(s) in partition dev (at most {node_probe.TIMEOUT_S:.0f} s)..."]


def test_a_step_that_does_not_finish_is_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm(SINFO, None)
    monkeypatch.setattr(slurm_runner, "run", fake)
    result = node_probe.probe_partition({}, partition="gpu", job=JOB, progress=lambda _: None)
    assert "did not answer" in result.error and result.probed == ("gpu1",)
    srun = next(args for args, _ in fake.calls if args[0] == "srun")
    name = next(arg for arg in srun if arg.startswith("--job-name="))
    scancel = [args for args, _ in fake.calls if args[0] == "scancel"]
    assert scancel and scancel[0][1] == "--name=" + name.split("=", 1)[1]
    assert summary(result).status == "warn"


def test_no_idle_node_runs_no_step(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm("node1|mixed|dev*\n", None)
    monkeypatch.setattr(slurm_runner, "run", fake)
    result = node_probe.probe_partition({}, partition=None, job=JOB, progress=lambda _: pytest.fail("no progress"))
    assert [args[0] for args, _ in fake.calls] == ["sinfo"] and result.skipped == (("node1", "mixed"),)


# ---------------------------------------------------------------- the CLI, with stand-in Slurm commands

_FAKE_COMMANDS = {
    "sbatch": 'echo "slurm 23.11.4"',
    "scontrol": 'case "$1" in ping) echo "Slurmctld(primary) at head is UP" ;; show) echo "AccountingStorageType = accounting_storage/slurmdbd" ;; esac',
    "sacct": "exit 0",
    "sinfo": 'printf "node1|idle|dev*\\nnode2|allocated|dev*\\n"',
    # srun runs the probe here, as one node would: skip srun's own flags, then run the task.
    "srun": 'if [ "$1" = --help ]; then echo "Usage: srun"; exit 0; fi\n'
    'while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done\nSLURMD_NODENAME=node1 exec "$@"',
}


def _doctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "slurm.conf").touch()
    for name, body in _FAKE_COMMANDS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
        "HYPERLAUNCH_HOME": str(tmp_path), "SLURM_CONF": str(tmp_path / "slurm.conf"), "PYTHONPATH": str(REPO),
        # The torchrun a job would run: one whose Python cannot be found on the "node".
        "HYPERLAUNCH_TORCHRUN": "/not/on/the/nodes/bin/torchrun",
    }
    return subprocess.run(
        [sys.executable, "-m", "hyperlaunch", "doctor", "--checkpoint-dir", str(tmp_path), *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )


@pytest.mark.slow
def test_doctor_probes_the_idle_nodes_and_fails_on_a_venv_they_cannot_see(tmp_path: Path) -> None:
    result = _doctor(tmp_path, "--json")
    document = json.loads(result.stdout)
    probe = document["node_probe"]
    assert probe["partition"] == "dev" and probe["skipped"] == [{"node": "node2", "state": "allocated"}]
    [node] = probe["nodes"]
    assert node["node"] == "node1" and node["status"] == "fail" and "/not/on/the/nodes/bin/torchrun" in node["findings"][0]
    assert node["system_python"] and node["system_python_version"]  # the one on the stand-in node's PATH
    check = document["checks"][-1]
    assert check["name"] == "compute nodes" and check["status"] == "fail"
    assert result.returncode == 8 and document["ok"] is False
    assert "probing 1 idle node(s) in partition dev" in result.stderr


@pytest.mark.slow
def test_doctor_prints_a_node_table_and_no_probe_skips_it(tmp_path: Path) -> None:
    table = _doctor(tmp_path)
    assert "compute nodes (partition dev)" in table.stdout and "node1" in table.stdout and "fail" in table.stdout
    skipped = _doctor(tmp_path, "--no-probe", "--json")
    document = json.loads(skipped.stdout)
    assert document["node_probe"] is None and "compute nodes" not in [c["name"] for c in document["checks"]]
    assert "probing" not in skipped.stderr


def test_nodes_taken_between_sinfo_and_srun_are_asked_for_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy cluster another job can take an idle node before the probe's srun asks for it."""
    line = json.dumps({**dataclasses.asdict(HEALTHY), "probe": 1, "node": "node3"})
    answers = iter(
        [
            slurm_runner.Result(("srun",), 1, "", "srun: error: Unable to allocate resources: Requested nodes are busy\n"),
            slurm_runner.Result(("srun",), 0, line + "\n", ""),
        ]
    )
    sinfos = iter([SINFO, "node1|allocated|dev*\nnode2|allocated|dev*\nnode3|idle|dev*\n"])
    calls: list[tuple[str, ...]] = []

    def fake(args: Sequence[str], **kwargs: object) -> slurm_runner.Result:
        calls.append(tuple(args))
        if args[0] == "sinfo":
            return slurm_runner.Result(tuple(args), 0, next(sinfos), "")
        return next(answers) if args[0] == "srun" else slurm_runner.Result(tuple(args), 0, "", "")

    monkeypatch.setattr(slurm_runner, "run", fake)
    notes: list[str] = []
    result = node_probe.probe_partition({}, partition=None, job=JOB, progress=notes.append)
    sruns = [args for args in calls if args[0] == "srun"]
    assert len(sruns) == 2 and "--nodelist=node3" in sruns[1]
    assert not result.error and [v.report.node for v in result.verdicts] == ["node3"]
    assert "taken meanwhile" in notes[1]
