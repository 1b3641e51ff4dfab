"""Hostile values for every job field and every input channel, and the one property every
`render`/`submit` must keep with them (see test_hostile_input.py).

A case is a command line, `HYPERLAUNCH_*` variables, a user config and a `./hyperlaunch.toml`
(with profiles), all built from (field, value) pairs put through one channel. Values are
generated with `@T@` standing for the example's temporary folder, so that every path and
every canary (`touch @T@/CANARY`) stays inside it and failing examples read the same on every
run; `Sandbox` substitutes it, runs the CLI in-process and checks the outcome."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import typing
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import assume
from hypothesis import strategies as st

from hyperlaunch.cli._job_flags import job_flag_parameters
from hyperlaunch.core.errors import EXIT_CODES
from tests.support.cli_runner import CliResult, run_cli
from tests.support.sbatch_harness import JOB_ID, run_script, sbatch_directive_args

T = "@T@"
CANARY = "CANARY"
PAYLOAD = "payload.sh"
"""A script in the sandbox that plants the canary when anything runs it (BASH_ENV=..., say)."""
CHANNELS = ("flag", "environment", "user_config", "project_config", "profile")
BASE_MODEL = "qwen3_tiny"
RESTART_COUNT = "1"
"""The harness runs the script as a job's second attempt, as Slurm would after a requeue."""

# -- the fields ------------------------------------------------------------------------------


def _kind(parameter: typing.Any) -> str:
    kind = typing.get_args(parameter.annotation)[0]
    base = [a for a in typing.get_args(kind) if a is not type(None)][0]
    return {str: "str", int: "int", bool: "bool"}.get(base, "list")


FIELD_KINDS: dict[str, str] = {p.name: _kind(p) for p in job_flag_parameters()}
"""Every JobSpec field a flag sets (the config layers accept the same names), by kind."""
FIELD_KINDS["trainer_args"] = "list"
NOT_FROM_ENVIRONMENT = ("env", "trainer_args")  # lists only TOML and flags can carry
PATH_FIELDS = ("checkpoint_dir", "log_dir", "run_dir", "container_workdir", "data")
CONTAINER_FIELDS = ("container_mounts", "container_workdir", "container_name")

PLAUSIBLE: dict[str, list[str]] = {
    "model": [BASE_MODEL, "llama_tiny", f"{T}/models/Qwen2.5-0.5B"],
    "nodes": ["2", "1"],
    "gpus_per_node": ["0", "8"],
    "instance_type": ["cpu", "p5.48xlarge"],
    "partition": ["gpu"],
    "account": ["acct"],
    "qos": ["normal"],
    "time": ["4:00:00", "2-00:00:00", "90"],
    "exclude": ["node1", "node[3-4]"],
    "container_image": [f"{T}/img.sqsh", "nvcr.io#nvidia/pytorch:24.01-py3"],
    "container_mounts": [f"{T}/data:/data", f"{T}/x:/x:ro"],
    "container_workdir": [f"{T}/wd"],
    "container_name": ["qwen-v1", "hl-old-0123456789abcdef"],
    "checkpoint_dir": [f"{T}/ck", "ck"],
    "data": [f"{T}/data.jsonl", "wikitext"],
    "max_steps": ["10"],
    "env": ["HF_TOKEN=secret", "NCCL_DEBUG=INFO"],
    "max_restarts": ["3", "0"],
    "job_name": ["run", "run.v2"],
    "log_dir": [f"{T}/logs", "logs"],
    "run_dir": [f"{T}/runs/x", "runs/x"],
    "signal_seconds": ["120"],
    "torchrun": ["torchrun"],
    "trainer_args": ["--text-field", "text", "--tokenizer"],
}
ENV_NAMES = [
    "HF_TOKEN", "NCCL_DEBUG", "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "IFS", "BASH_ENV", "ENV",
    "SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES",
    "SLURM_LAUNCH_NODE_IPADDR", "PET_SIGNALS_TO_HANDLE", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
    "SHELLOPTS", "PS4", "PROMPT_COMMAND", "_", "a", "A1",
]

# -- hostile text ----------------------------------------------------------------------------

INJECTIONS = [
    f"$(touch {T}/{CANARY})",
    f"`touch {T}/{CANARY}`",
    f";touch {T}/{CANARY}",
    f"&& touch {T}/{CANARY}",
    f"|touch {T}/{CANARY}",
    f"\ntouch {T}/{CANARY}\n",
    f"\r\ntouch {T}/{CANARY}",
    f"'; touch {T}/{CANARY}; '",
    f'"; touch {T}/{CANARY}; "',
    f"$(touch${{IFS}}{T}/{CANARY})",
    f"\n#SBATCH --wrap=touch {T}/{CANARY}",
    "\n#SBATCH --nodes=99",
    "\n#SBATCH --chdir=/",
    f"x #SBATCH --wrap=touch {T}/{CANARY}",
    f'" --wrap="touch {T}/{CANARY}',
    f"\\\n--wrap=touch {T}/{CANARY}",
    f"{T}/{PAYLOAD}",
]
ATOMS = [
    "'", '"', "\\", "$", "${", "$HOME", "${IFS}", "!", "&", "|", ";", "<", ">", "(", ")", "{a,b}", "*", "?",
    "#", " ", "\t", "\n", "\r", "\x00", "\x0b", "\x1b[31m", "\x7f", "\u2028", "\x85",
    "%j", "%x", "%%", "%", "%A", "\\%j", "[/bold]", "[bold]", "[link=x]", ".", "..", "../", "/", "//", "~", "-",
    "--", "-x", "=", ",", ":", "@", "٤", "٠", "１", "\u200f", "\u202e", "e\u0301", "\ufeff", "ß", "🙂",
    "#SBATCH", "--wrap", "UNLIMITED",
]
NUMBERS = [
    "99999999999999999999", "-99999999999999999999", "2147483648", "2147483647", "4294967296", "65536",
    "-1", "0", "1", "٤", "٤٠", "１", " 4", "4 ", "4\n", "\n4", "1_0", "+5", "0x10", "1e3", "1.5", "", " ",
]
TIMES = ["4:00:00\n", "٤:٠٠:٠٠", "4:00:00 ", "99999999999999999999", "-1", "0", "1-", "-1:00", "4:60:99", "unlimited\n"]
_CHARS = st.characters(blacklist_categories=("Cs",), max_codepoint=0x1F64F)


def hostile_text(field_name: str = "") -> st.SearchStrategy[str]:
    plausible = PLAUSIBLE.get(field_name, ["x"])
    part = st.one_of(
        st.sampled_from(INJECTIONS),
        st.sampled_from(ATOMS),
        st.sampled_from(plausible),
        st.text(_CHARS, max_size=6),
    )
    return st.one_of(
        st.sampled_from(INJECTIONS),
        st.sampled_from(ATOMS + NUMBERS + TIMES),
        st.lists(part, min_size=2, max_size=4).map("".join),
        st.tuples(st.sampled_from(ATOMS + INJECTIONS), st.integers(2, 5000)).map(lambda t: (t[0] * t[1])[:5000]),
        st.just("a" * 5000),
        st.just(""),
    )


def toml_value(field_name: str) -> st.SearchStrategy[object]:
    """What a TOML file can hold for a field: hostile text, numbers, wrong types."""
    text = hostile_text(field_name)
    return st.one_of(
        text,
        text,
        st.integers(min_value=-(10**20), max_value=10**20),
        st.sampled_from([10**19, -(2**31), 2**31, 2**63 - 1, 0, -1]),
        st.booleans(),
        st.lists(text, max_size=3),
        st.floats(allow_nan=True, allow_infinity=True),
        st.dictionaries(st.sampled_from(["a", "model"]), text, max_size=1),
    )


@dataclass
class Case:
    """What one example hands to the CLI, before @T@ is substituted."""

    command: str
    fields: list[tuple[str, object]] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    trainer_args: list[str] = field(default_factory=list)
    environ: dict[str, str] = field(default_factory=dict)
    user_config: dict[str, object] | str | None = None
    project_config: dict[str, object] | str | None = None
    model_dirs: list[str] = field(default_factory=list)
    output: str | None = None
    env_pairs: list[tuple[str, str]] = field(default_factory=list)
    """--env pairs given on the command line, to check they reach the trainer intact."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@st.composite
def field_values(draw: st.DrawFn, channel: str) -> list[tuple[str, object]]:
    """One to three (field, value) pairs for `channel`, strings as the channel carries them."""
    names = sorted(FIELD_KINDS)
    if channel == "environment":
        names = [n for n in names if n not in NOT_FROM_ENVIRONMENT]
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    if channel != "environment" and "env" not in chosen and draw(st.integers(0, 2)) == 0:
        chosen.append("env")  # exports reach the script as code: give them a larger share
    if any(n in CONTAINER_FIELDS for n in chosen) and "container_image" not in chosen:
        chosen.append("container_image")  # the container fields are read only with an image
    pairs: list[tuple[str, object]] = []
    for name in chosen:
        kind = FIELD_KINDS[name]
        if channel in ("user_config", "project_config", "profile"):
            value: object = draw(_toml_field_value(name, kind))
        elif kind == "bool":
            value = draw(st.booleans()) if channel == "flag" else draw(hostile_text(name) | st.sampled_from(["yes", "0"]))
        elif kind == "list" and channel == "flag":
            value = draw(st.lists(_list_item(name), min_size=1, max_size=3))
        elif kind == "list":  # HYPERLAUNCH_EXCLUDE=a,b
            value = ",".join(draw(st.lists(_list_item(name), min_size=1, max_size=3)))
        else:
            value = draw(_scalar(name, kind))
        if channel in ("flag", "environment"):
            value = _without_nul(value)  # neither argv nor the environment can carry NUL
        pairs.append((name, value))
    return pairs


def _without_nul(value: object) -> object:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def _scalar(name: str, kind: str) -> st.SearchStrategy[str]:
    text = hostile_text(name)
    if kind == "int":
        text = st.one_of(st.sampled_from(NUMBERS), st.integers(-(10**20), 10**20).map(str), text)
    elif name == "time":
        text = st.one_of(st.sampled_from(TIMES), text)
    elif name == "model":
        text = st.one_of(text, st.builds(lambda s: f"{T}/models/{s}", text))
    if name in PATH_FIELDS:
        text = st.one_of(text, st.builds(lambda s: f"{T}/p/{s}", text), st.builds(lambda s: f"p/{s}", text))
    return text


def _list_item(name: str) -> st.SearchStrategy[str]:
    text = hostile_text(name)
    if name == "env":
        key = st.one_of(st.sampled_from(ENV_NAMES), text)
        value = st.one_of(text, st.sampled_from([f"{T}/{PAYLOAD}", "0", "99", ""]))
        pair = st.builds(lambda k, v: f"{k}={v}", key, value)
        return st.one_of(pair, pair, pair, text)
    if name == "trainer_args":
        return st.one_of(text, st.sampled_from(PLAUSIBLE["trainer_args"]))
    return text


def _toml_field_value(name: str, kind: str) -> st.SearchStrategy[object]:
    if name == "env":
        names = st.one_of(st.sampled_from(ENV_NAMES), hostile_text("env"))
        values = st.one_of(hostile_text("env"), st.sampled_from([f"{T}/{PAYLOAD}", "0"]), st.integers(), st.booleans())
        return st.one_of(st.dictionaries(names, values, min_size=1, max_size=3), toml_value(name))
    if kind == "list":
        return st.one_of(st.lists(_list_item(name), min_size=1, max_size=3), toml_value(name))
    return st.one_of(_scalar(name, "int" if kind == "int" else "str"), toml_value(name))


BROKEN_FILES = [
    "model = ",
    "[profile\n",
    "a = " + "[" * 3000 + "]" * 3000,
    "a = " + "{b = " * 3000 + "1" + "}" * 3000,
    "model = 'x'\nmodel = 'y'\n",
    "\x00\x01",
    "profile = 1\n",
    "[profile]\nx = 1\n",
    "[env]\n'A B' = 1\n",
]


# -- TOML ------------------------------------------------------------------------------------


def _toml_string(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def to_toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(value, "nan" if value != value else repr(value))
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(to_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_string(str(k))} = {to_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def to_toml(table: dict[str, object]) -> str:
    return "".join(f"{_toml_string(k)} = {to_toml_value(v)}\n" for k, v in table.items())


# -- building a case from a channel ----------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn, channel: str, command: str = "render") -> Case:
    pairs = draw(field_values(channel))
    case = Case(command=command, fields=pairs)
    user: dict[str, object] = {"model": BASE_MODEL}  # the lowest layer; every channel overrides it
    case.user_config = user
    for name, value in pairs:
        if name == "model" and isinstance(value, str) and value.startswith(f"{T}/models/"):
            case.model_dirs.append(value)
    if channel == "flag":
        for name, value in pairs:
            if name == "trainer_args":
                case.trainer_args += typing.cast(list, value)
            elif FIELD_KINDS[name] == "bool":
                case.args.append(_flag(name) if value else _flag(name).replace("--", "--no-", 1))
            elif FIELD_KINDS[name] == "list":
                for item in typing.cast(list, value):
                    case.args += [_flag(name), item]
                    if name == "env" and "=" in item:
                        key, _, text = item.partition("=")
                        case.env_pairs.append((key, text))
            else:
                case.args += [_flag(name), typing.cast(str, value)]
    elif channel == "environment":
        case.environ = {f"HYPERLAUNCH_{name.upper()}": typing.cast(str, value) for name, value in pairs}
    else:
        table = {name: value for name, value in pairs}
        if channel == "user_config":
            user.update(table)
        elif channel == "project_config":
            case.project_config = table
        else:
            profile = draw(st.one_of(st.sampled_from(["gpu", "hyperpod"]), hostile_text().map(_without_nul)))
            holder = draw(st.sampled_from(["user", "project"]))
            target = user if holder == "user" else case.project_config if isinstance(case.project_config, dict) else {}
            target["profile"] = {profile: table}
            if holder == "project":
                case.project_config = target
            if draw(st.booleans()):
                case.args += ["--profile", profile]
            else:
                case.environ["HYPERLAUNCH_PROFILE"] = profile
        if draw(st.integers(0, 9)) == 0:  # now and then, a file no parser should choke on
            broken = draw(st.sampled_from(BROKEN_FILES))
            if channel == "user_config":
                case.user_config = broken
            else:
                case.project_config = broken
    if command == "render" and draw(st.integers(0, 3)) == 0:
        case.output = draw(st.one_of(
            st.just(f"{T}/work/job.sbatch"),
            st.just(f"{T}/work/missing/job.sbatch"),
            st.just(f"{T}/work"),
            st.builds(lambda s: f"{T}/work/{s}", hostile_text().map(_without_nul)),
        ))
    return case


# -- running a case --------------------------------------------------------------------------


@dataclass
class Outcome:
    result: CliResult
    new_paths: list[str]
    submitted: list[str]


class Sandbox:
    """One example's temporary folder: work/ (the current directory), home/ (HOME),
    hlhome/ (HYPERLAUNCH_HOME) and run/ (where the harness runs the script)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work, self.home, self.hlhome = root / "work", root / "home", root / "hlhome"
        for folder in (self.work, self.home, self.hlhome, root / "models"):
            folder.mkdir()
        payload = root / PAYLOAD
        payload.write_text(f"touch {root}/{CANARY}\n")
        payload.chmod(0o755)

    def sub(self, text: str) -> str:
        return text.replace(T, str(self.root))

    def sub_any(self, value: object) -> object:
        if isinstance(value, str):
            return self.sub(value)
        if isinstance(value, list):
            return [self.sub_any(v) for v in value]
        if isinstance(value, dict):
            return {self.sub_any(k): self.sub_any(v) for k, v in value.items()}
        return value

    def inside(self, path: str) -> bool:
        """Whether a path value, resolved as hyperlaunch resolves it, stays in the sandbox."""
        home = str(self.home)
        expanded = home + path[1:] if path == "~" or path.startswith("~/") else path
        if expanded.startswith("~"):
            return False  # ~user: another user's home
        resolved = os.path.normpath(os.path.join(self.work, expanded))
        return resolved == str(self.root) or resolved.startswith(str(self.root) + os.sep)

    def snapshot(self) -> dict[str, str]:
        found = {}
        for folder, dirs, files in os.walk(self.root):
            for name in dirs + files:
                path = os.path.join(folder, name)
                found[os.path.relpath(path, self.root)] = "dir" if name in dirs else "file"
        return found

    def canaries(self) -> list[str]:
        """The canary file, if a smuggled `touch @T@/CANARY` ran. (A folder of that name deeper
        down is only a path value that holds the text, which mkdir -p created.)"""
        canary = self.root / CANARY
        return [str(canary)] if canary.is_file() else []


CREATED_PATHS = ("checkpoint_dir", "run_dir", "log_dir", "model")
"""Fields whose folders the CLI, the script or this test create."""


def _guard_paths(sandbox: Sandbox, case: Case) -> None:
    """Examples whose created folders would resolve outside the sandbox are not run (the
    scripts run as root)."""
    for name, value in case.fields:
        if name in CREATED_PATHS and isinstance(value, str):
            assume(sandbox.inside(sandbox.sub(value)))
    if case.output is not None:
        assume(sandbox.inside(sandbox.sub(case.output)))


def prepare(sandbox: Sandbox, case: Case) -> None:
    _guard_paths(sandbox, case)
    for model in case.model_dirs:
        try:
            folder = Path(sandbox.sub(model))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.json").write_text(json.dumps(TINY_QWEN3_CONFIG))
        except (OSError, ValueError):
            pass  # a name no file system takes: hyperlaunch must say so itself
    for config, path in ((case.user_config, sandbox.hlhome / "config.toml"), (case.project_config, sandbox.work / "hyperlaunch.toml")):
        if isinstance(config, dict):
            path.write_text(to_toml(typing.cast(dict, sandbox.sub_any(config))), encoding="utf-8")
        elif isinstance(config, str):
            path.write_text(config, encoding="utf-8", errors="surrogateescape")


TINY_QWEN3_CONFIG = {
    "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512,
    "max_position_embeddings": 256, "tie_word_embeddings": True,
}


class FakeSbatch:
    """sbatch at hyperlaunch.slurm.runner.run: records what it was handed, accepts or refuses. What
    hyperlaunch asks of the cluster before rendering (sinfo, scontrol show) finds a cluster
    that says nothing."""

    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.scripts: list[str] = []

    def __call__(self, args: typing.Sequence[str], **_: object) -> object:
        from hyperlaunch.slurm.runner import Result

        if list(args[:1]) == ["sinfo"] or list(args[:2]) == ["scontrol", "show"]:
            return Result(tuple(args), 0, "", "")
        assert args[0] == "sbatch", f"only sbatch and queries are expected here, got {list(args)}"
        # As sbatch reads it: read_text's universal newlines would turn a smuggled \r\n into \n.
        self.scripts.append(Path(args[-1]).read_bytes().decode("utf-8"))
        if self.refuse:
            return Result(tuple(args), 1, "", "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
        return Result(tuple(args), 0, f"Submitted batch job {JOB_ID}\n", "")


def run_case(case: Case, *, refuse: bool = False, mp: pytest.MonkeyPatch, sandbox: Sandbox, command: str | None = None) -> Outcome:
    """Run `hyperlaunch <command>` in-process with the case's inputs, in the sandbox (prepared
    with `prepare` first)."""
    for name in list(os.environ):
        if name.startswith(("HYPERLAUNCH_", "SLURM_")):
            mp.delenv(name)
    # The templates' bytecode cache (hyperlaunch.script.template_cache) is written under the home
    # by whichever render first builds the Jinja environment in this process: by design, and not
    # what "wrote nothing" means here. Off, so the property does not depend on the test order.
    mp.setenv("HYPERLAUNCH_NO_TEMPLATE_CACHE", "1")
    mp.setenv("HOME", str(sandbox.home))
    mp.setenv("HYPERLAUNCH_HOME", str(sandbox.hlhome))
    mp.setenv("SLURM_CONF", str(sandbox.root / "slurm.conf"))  # a cluster is "configured": no dev-cluster lookup
    for name, value in case.environ.items():
        mp.setenv(name, sandbox.sub(value))
    mp.chdir(sandbox.work)
    # The venv's real torchrun would start real training; the harness stubs `torchrun`.
    mp.setattr("hyperlaunch.job.settings.default_torchrun", lambda: "torchrun")
    fake = FakeSbatch(refuse)
    mp.setattr("hyperlaunch.slurm.runner.run", fake)
    args = [command or case.command, *map(sandbox.sub, case.args)]
    if case.output is not None:
        args += ["-o", sandbox.sub(case.output)]
    if case.trainer_args:
        args += ["--", *map(sandbox.sub, case.trainer_args)]
    before = sandbox.snapshot()
    result = run_cli(args, mp)
    after = sandbox.snapshot()
    new = sorted(f"{path} ({kind})" for path, kind in after.items() if path not in before)
    return Outcome(result, new, fake.scripts)


# -- the property ----------------------------------------------------------------------------

_USAGE_ERROR = re.compile(r"Usage: [^\n]*\nTry '[^\n]*' for help\.\n\nError: [^\n]*\n", re.DOTALL)
_BASH_ERRORS = (
    "syntax error", "integer expression expected", "unbound variable", "bad substitution",
    "ambiguous redirect", "invalid arithmetic operator", "value too great for base", "invalid number",
    "numeric argument required", "integer expected",
)
SBATCH_OPTIONS = {
    "--job-name", "--nodes", "--ntasks-per-node", "--gpus-per-node", "--partition", "--account", "--qos",
    "--time", "--exclusive", "--exclude", "--requeue", "--signal", "--open-mode", "--output", "--error",
}
"""Every option render.sbatch_flags can write; anything else in the header was smuggled in."""
RESERVED_IN_TRAINER = {
    "SLURM_JOB_ID": JOB_ID, "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_RESTART_COUNT": RESTART_COUNT,
}
"""What Slurm (the harness) set for the job: no value a user gives may change them."""
NEVER_EXPORTED = ("BASH_ENV", "ENV", "IFS")


def check_error(outcome: Outcome, *, allowed_new: tuple[str, ...] = ()) -> None:
    result = outcome.result
    assert result.exit_code in EXIT_CODES and result.exit_code not in (0, 1, 130), (
        f"exit {result.exit_code}, not a documented error code (1 is 'internal error'): {result.stderr!r}"
    )
    assert "Traceback" not in result.output, f"a traceback: {result.output[-2000:]!r}"
    one_line = result.stderr.startswith("hyperlaunch: error: ") and result.stderr.count("\n") == 1 and result.stderr.endswith("\n")
    usage = result.exit_code == 2 and _USAGE_ERROR.fullmatch(result.stderr) is not None
    assert one_line or usage, f"stderr is not one error line: {result.stderr!r}"
    assert result.stdout == "", f"an error that printed on stdout: {result.stdout[:500]!r}"
    written = [p for p in outcome.new_paths if not any(p.startswith(a) for a in allowed_new)]
    assert not written, f"a failed command wrote: {written[:5]}"


def check_script(script: str, sandbox: Sandbox, case: Case) -> None:
    """The script parses, its header holds only hyperlaunch's directives, and it runs inert."""
    assert script.startswith("#!/bin/bash\n"), f"not a bash script: {script[:200]!r}"
    header = _header(script)
    for line in header:
        if line.startswith("#SBATCH"):
            # sbatch reads bytes: no byte of a non-ASCII character is a space, quote, `#` or
            # backslash to it (and only \n ends a line, not U+0085 or U+2028 as in Python).
            ascii_line = "".join(c if c.isascii() else "_" for c in line)
            for legacy in (False, True):
                try:
                    args = sbatch_directive_args(ascii_line + "\n", legacy=legacy)
                except AssertionError as err:
                    raise AssertionError(f"#SBATCH line sbatch cannot parse ({'legacy' if legacy else 'modern'}): {line!r}: {err}") from None
                assert len(args) == 1, f"an #SBATCH line that sbatch reads as {len(args)} arguments: {line!r}"
                option = args[0].split("=", 1)[0]
                assert option in SBATCH_OPTIONS, f"a smuggled #SBATCH directive {option!r}: {line!r}"
    options = [line.split("=", 1)[0].split()[1] for line in header if line.startswith("#SBATCH ")]
    assert len(options) == len(set(options)), f"a repeated #SBATCH directive: {options}"
    folder = sandbox.root / "run"
    folder.mkdir(exist_ok=True)
    (folder / "check.sh").write_text(script)
    syntax = subprocess.run(["bash", "-n", str(folder / "check.sh")], capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, f"bash -n fails: {syntax.stderr[-1000:]!r}"
    run = run_script(script, folder, env={"SLURM_RESTART_COUNT": RESTART_COUNT})
    # A --torchrun naming the payload asks the job to run it: that is its purpose, not a smuggling.
    asked = any(name == "torchrun" and value == f"{T}/{PAYLOAD}" for name, value in case.fields)
    assert asked or not sandbox.canaries(), f"a smuggled command ran: {sandbox.canaries()} (stderr {run.stderr[-500:]!r})"
    broken = [line for line in run.stderr.splitlines() if any(e in line for e in _BASH_ERRORS) and line.startswith(("bash:", str(folder), "/"))]
    assert not broken, f"the script hit a bash error at run time: {broken[:3]}"
    if run.trainer is not None:
        env = run.trainer["env"]
        for name, value in RESERVED_IN_TRAINER.items():
            assert env.get(name) == value, f"the job's {name} is {env.get(name)!r} in the trainer, Slurm set {value!r}"
        for name in NEVER_EXPORTED:
            assert name not in env, f"{name}={env[name]!r} reaches the trainer's environment"
        reserved = set(RESERVED_IN_TRAINER) | set(NEVER_EXPORTED) | {"PATH"}
        given = {key: sandbox.sub(value) for key, value in case.env_pairs}
        for key, value in given.items():
            if key not in reserved and not key.startswith(("LD_", "SLURM_", "PET_", "TORCH_")):
                assert env.get(key) == value, f"--env {key} arrives as {env.get(key)!r}, given {value!r}"
        if case.trainer_args:
            tail = [sandbox.sub(a) for a in case.trainer_args]
            assert run.trainer["argv"][-len(tail):] == tail, f"trainer arguments arrive as {run.trainer['argv'][-len(tail):]!r}, given {tail!r}"


def _header(script: str) -> list[str]:
    """The lines sbatch reads directives from: up to the first command."""
    lines = []
    for line in script.split("\n"):
        if line.strip() and not line.startswith("#"):
            break
        lines.append(line)
    return lines


def check_success(outcome: Outcome, sandbox: Sandbox, case: Case) -> str:
    """exit 0: the script render printed (or wrote with -o), checked."""
    result = outcome.result
    assert "Traceback" not in result.output, f"a traceback: {result.output[-2000:]!r}"
    if case.output is None:
        script = result.stdout
        assert not outcome.new_paths, f"render without -o wrote: {outcome.new_paths[:5]}"
    else:
        target = Path(sandbox.sub(case.output))
        script = target.read_text(encoding="utf-8")
        rel = os.path.relpath(target, sandbox.root)
        assert [p for p in outcome.new_paths if not p.startswith(rel + " ")] == [], f"render -o wrote more: {outcome.new_paths[:5]}"
    check_script(script, sandbox, case)
    return script


def check(outcome: Outcome, sandbox: Sandbox, case: Case) -> None:
    assert not sandbox.canaries(), f"the CLI itself ran a smuggled command: {sandbox.canaries()}"
    if outcome.result.exit_code == 0:
        check_success(outcome, sandbox, case)
    else:
        check_error(outcome)


def sandbox_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="hl-hostile-")
