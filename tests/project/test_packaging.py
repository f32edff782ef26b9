"""The install layout: policies/, envs/, eval/, serve/, train/ live under oxygen_gym.*, never at the top of
site-packages; module names say their job (no two alike, none shadowing the standard library)."""
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_imports_under_oxygen_gym():
    import oxygen_gym
    import oxygen_gym.envs
    import oxygen_gym.eval
    import oxygen_gym.policies
    import oxygen_gym.serve
    import oxygen_gym.train

    assert Path(oxygen_gym.policies.__file__).parent == ROOT / "policies"
    assert Path(oxygen_gym.envs.__file__).parent == ROOT / "envs"
    assert Path(oxygen_gym.eval.__file__).parent == ROOT / "eval"
    assert Path(oxygen_gym.serve.__file__).parent == ROOT / "serve"
    assert Path(oxygen_gym.train.__file__).parent == ROOT / "train"


def test_every_package_folder_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = cfg["package-dir"]
    listed = set(cfg["packages"])
    for top, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            name = ".".join([top, *rel.parts]) if rel.parts else top
            assert name in listed, f"{name} ({init.parent}) is missing from [tool.setuptools].packages"


def _installed_modules() -> list[Path]:
    """Every module file of every package pyproject installs (its package-dir folders, walked as packages)."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    tops = {ROOT / folder for folder in mapping.values()}
    return sorted({f for top in tops for init in top.rglob("__init__.py") for f in init.parent.glob("*.py")})


def test_no_two_installed_modules_share_a_name():
    """A module's file name says its job, so two files with one name are two jobs under one word (or one job twice)."""
    by_name: dict[str, list[str]] = {}
    for path in _installed_modules():
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in by_name.items()
              if len(paths) > 1}
    assert not shared, f"module file names used more than once: {shared}"


def test_no_module_or_package_shadows_the_standard_library():
    names = {}
    for path in _installed_modules():
        name = path.parent.name if path.name == "__init__.py" else path.stem
        names[name] = str(path.relative_to(ROOT))
    shadowing = {n: where for n, where in names.items() if n in sys.stdlib_module_names}
    assert not shadowing, f"named after a standard-library module: {shadowing}"


def test_wheel_has_nothing_generic_at_top_level(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{proc.stderr[-2000:]}")
    (wheel,) = tmp_path.glob("oxygen_gym-*.whl")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert "oxygen_gym" in tops
    assert not tops & {"envs", "policies", "eval", "serve", "train", "tests"}, tops
    names = zipfile.ZipFile(wheel).namelist()
    for sub in ("policies", "envs", "eval", "serve", "train"):
        assert f"oxygen_gym/{sub}/__init__.py" in names


def test_cli_unknown_and_missing_subcommands(capsys):
    from oxygen_gym.cli import main

    assert main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err
    assert main([]) == 2
