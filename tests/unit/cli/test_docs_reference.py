"""The docs' CLI reference and exit-code pages are what the CLI itself says: a help text or an
exit code changed without `python -m hyperlaunch.cli.reference` fails here."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.cli import reference

ROOT = Path(__file__).resolve().parents[3]


def test_the_generated_reference_pages_are_current() -> None:
    for path, text in reference.pages().items():
        committed = (ROOT / path).read_text()
        assert committed == text, f"{path} is stale: run `python -m hyperlaunch.cli.reference` (or make reference)"


def test_the_reference_names_every_command_and_exit_code() -> None:
    page = reference.cli_page()
    for heading in ("## hyperlaunch submit", "## hyperlaunch render", "### hyperlaunch dev-cluster up", "### hyperlaunch help exit-codes"):
        assert heading in page
    assert "Cluster options:" in page.split("## hyperlaunch submit", 1)[1]
    from hyperlaunch.core.errors import EXIT_CODES

    codes = reference.exit_codes_page()
    assert all(f"| {code} |" in codes for code in EXIT_CODES)


def test_a_changed_help_makes_the_check_fail(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert reference.main(["--check"]) == 1  # missing pages are stale
    assert reference.main([]) == 0 and reference.main(["--check"]) == 0
    page = tmp_path / reference.CLI_PAGE
    page.write_text(page.read_text().replace("Cluster options:", "Cluster:"))
    assert reference.main(["--check"]) == 1


def test_the_documented_example_config_is_one_hyperlaunch_accepts_with_each_profile(tmp_path: Path) -> None:
    from hyperlaunch.job.plan import plan_job
    from hyperlaunch.job.settings import PROJECT_CONFIG_NAME

    example = (ROOT / "docs" / "hyperlaunch.example.toml").read_text()
    (tmp_path / PROJECT_CONFIG_NAME).write_text(example)
    profiles = [line.split(".", 1)[1].rstrip("]").split("]")[0] for line in example.splitlines() if line.startswith("[profile.") and line.count(".") == 1]
    assert profiles, "the example shows profiles"
    for profile in [None, *profiles]:
        spec = plan_job({}, profile=profile, cwd=tmp_path, environ={}, user_config=tmp_path / "user.toml").spec
        assert spec.job.model == "qwen3_0_6b"
