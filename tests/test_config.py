"""Config files: kernelfix.toml or [tool.kernelfix], per-task overrides, typos rejected."""

import pytest

from kernelfix.cli.config_file import ConfigError, load_config
from kernelfix.tools.legality.allowlist import DEFAULT_ALLOWED, is_allowed, make_allowed


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config()
    assert (
        cfg.judge.trials == 5 and cfg.judge.atol is None and cfg.judge.rtol is None and cfg.judge.timing_runs == 100
    )  # by dtype


def test_kernelfix_toml_and_task_overrides(tmp_path, monkeypatch):
    (tmp_path / "kernelfix.toml").write_text(
        '[judge]\ntrials = 7\natol = 0.001\n[judge.tasks."gemm"]\natol = 0.05\nextra_allowed_ops = ["mm"]\n'
    )
    monkeypatch.chdir(tmp_path)
    judge = load_config().judge
    assert judge.trials == 7 and judge.atol == 0.001
    gemm = judge.for_task("gemm")
    assert gemm.atol == 0.05 and gemm.trials == 7 and gemm.extra_allowed_ops == ["mm"]
    assert judge.for_task("other") is judge


def test_pyproject_tool_section(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.kernelfix.judge]\nrtol = 0.2\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert load_config().judge.rtol == 0.2


def test_typos_and_bad_values_are_errors(tmp_path):
    bad = tmp_path / "kernelfix.toml"
    bad.write_text("[judge]\ntrails = 3\n")
    with pytest.raises(ConfigError, match="trails"):
        load_config(bad)
    bad.write_text("[judge]\ntrials = 0\n")
    with pytest.raises(ConfigError, match="trials"):
        load_config(bad)
    bad.write_text("not toml [")
    with pytest.raises(ConfigError):
        load_config(bad)


def test_allowlist():
    assert is_allowed("aten::empty_like") and is_allowed("aten.view.default") and is_allowed("aten::_cast_Float")
    assert not is_allowed("aten::mm") and not is_allowed("aten::relu")
    assert is_allowed("mylib::my_kernel")  # the candidate's own custom op; what it calls is checked separately
    allowed = make_allowed(extra=["aten::mm"], remove=["clone"])
    assert is_allowed("aten::mm", allowed) and not is_allowed("aten::clone", allowed)
    assert {"empty", "view", "copy_", "contiguous", "item"} <= DEFAULT_ALLOWED


def test_interactive_sessions_profile_by_default_unless_told_not_to(tmp_path, monkeypatch):
    import argparse

    from kernelfix.cli.common import judge_config_for

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(config=None, device=None, trials=None, atol=None, rtol=None, profile=None)
    assert judge_config_for(args, profile_by_default=True).profile is True
    assert judge_config_for(args).profile is False  # eval, batch
    assert (
        judge_config_for(argparse.Namespace(**{**vars(args), "profile": False}), profile_by_default=True).profile
        is False
    )
    (tmp_path / "kernelfix.toml").write_text("[judge]\nprofile = false\n")
    assert judge_config_for(args, profile_by_default=True).profile is False


def test_every_package_directory_is_installed():
    """A non-editable install (a wheel, pip install --target) carries only the packages pyproject lists:
    a subpackage left out works in the editable checkout and breaks everywhere else."""
    import tomllib

    from conftest import REPO_ROOT

    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    listed = set(data["tool"]["setuptools"]["packages"])
    dirs = data["tool"]["setuptools"]["package-dir"]
    found = set()
    for pkg, d in dirs.items():
        for init in (REPO_ROOT / d).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO_ROOT / d)
            found.add(".".join([pkg, *rel.parts]))
    assert found <= listed, f"missing from [tool.setuptools] packages: {sorted(found - listed)}"
