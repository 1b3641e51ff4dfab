"""Hostile values in every job field, through every input channel (flags, HYPERLAUNCH_*,
the user config, ./hyperlaunch.toml and its profiles), keep one promise: `render` and
`submit` either exit 0 with a script that bash parses, whose #SBATCH header holds only
hyperlaunch's directives and which runs inert under stub Slurm commands, or fail with a
documented exit code, one line on stderr, no traceback and nothing written.

Runs in-process with a fixed seed and example budget (about a minute on two cores); each
example gets a fresh temporary folder that holds every path it generates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hostile_input import (
    CHANNELS,
    Case,
    Sandbox,
    cases,
    check,
    check_error,
    check_script,
    prepare,
    run_case,
    sandbox_dir,
)


def fixed(examples: int) -> settings:
    """A fixed seed and budget: the same examples on every run, CI included."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large, HealthCheck.large_base_example,
        ],
    )


@pytest.fixture(autouse=True, scope="module")
def _compiled_templates() -> None:
    """Compile the templates once, before any example: the compiled-template cache is written
    on first use, which is not the write an example is checked for."""
    from hyperlaunch.script.render import _template

    _template()


@pytest.fixture(autouse=True, scope="module")
def _local_aws(_moto_server: str) -> Iterator[None]:
    """A valid --hyperpod-cluster name is asked of AWS: a local moto server that holds no
    cluster (one-line AwsError, exit 10), never AWS itself."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
            mp.delenv(name, raising=False)
        for name, value in (
            ("AWS_ENDPOINT_URL", _moto_server), ("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_REGION", "us-west-2"), ("AWS_EC2_METADATA_DISABLED", "true"),
        ):
            mp.setenv(name, value)
        yield


def _render(case: Case) -> None:
    with pytest.MonkeyPatch.context() as mp, sandbox_dir() as root:
        sandbox = Sandbox(Path(root))
        prepare(sandbox, case)
        check(run_case(case, mp=mp, sandbox=sandbox), sandbox, case)


@fixed(90)
@given(case=cases("flag"))
@pytest.mark.slow
def test_render_with_hostile_flags(case: Case) -> None:
    _render(case)


@fixed(70)
@given(case=cases("environment"))
@pytest.mark.slow
def test_render_with_hostile_environment_variables(case: Case) -> None:
    _render(case)


@fixed(60)
@given(case=cases("user_config"))
def test_render_with_a_hostile_user_config(case: Case) -> None:
    _render(case)


@fixed(60)
@given(case=cases("project_config"))
@pytest.mark.slow
def test_render_with_a_hostile_project_config(case: Case) -> None:
    _render(case)


@fixed(60)
@given(case=cases("profile"))
@pytest.mark.slow
def test_render_with_a_hostile_profile(case: Case) -> None:
    _render(case)


@fixed(60)
@given(data=st.data(), channel=st.sampled_from(CHANNELS))
@pytest.mark.slow
def test_submit_sends_what_render_prints_or_fails_in_one_line(data: st.DataObject, channel: str) -> None:
    case = data.draw(cases(channel, command="submit"))
    with pytest.MonkeyPatch.context() as mp, sandbox_dir() as root:
        sandbox = Sandbox(Path(root))
        prepare(sandbox, case)
        rendered = run_case(case, mp=mp, sandbox=sandbox, command="render")
        submitted = run_case(case, mp=mp, sandbox=sandbox)
        assert not sandbox.canaries(), f"the CLI itself ran a smuggled command: {sandbox.canaries()}"
        if submitted.result.exit_code != 0:
            check_error(submitted)
            # The one refusal only submit can make: an `--env NAME` whose value must come from
            # the environment sbatch runs in (render prints `export NAME` wherever it runs).
            if "from this environment, where it is not set" not in submitted.result.stderr:
                assert rendered.result.exit_code != 0, f"render accepted what submit refused: {submitted.result.stderr!r}"
            return
        assert len(submitted.submitted) == 1, f"sbatch ran {len(submitted.submitted)} times"
        script = submitted.submitted[0]
        assert rendered.result.exit_code == 0, f"submit accepted what render refused: {rendered.result.stderr!r}"
        assert script == rendered.result.stdout, "what render prints differs from what submit submits"
        check_script(script, sandbox, case)


@fixed(25)
@given(data=st.data(), channel=st.sampled_from(CHANNELS))
def test_a_refused_submission_fails_in_one_line_and_leaves_nothing(data: st.DataObject, channel: str) -> None:
    case = data.draw(cases(channel, command="submit"))
    with pytest.MonkeyPatch.context() as mp, sandbox_dir() as root:
        sandbox = Sandbox(Path(root))
        prepare(sandbox, case)
        outcome = run_case(case, mp=mp, sandbox=sandbox, refuse=True)
        assert outcome.result.exit_code != 0, "sbatch refused, yet submit exited 0"
        check_error(outcome)
