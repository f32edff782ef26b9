"""The install layout: policies/, envs/, eval/ live under oxygen_gym.*, never at the top of site-packages."""
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_imports_under_oxygen_gym():
    import oxygen_gym
    import oxygen_gym.envs
    import oxygen_gym.eval
    import oxygen_gym.policies

    assert Path(oxygen_gym.policies.__file__).parent == ROOT / "policies"
    assert Path(oxygen_gym.envs.__file__).parent == ROOT / "envs"
    assert Path(oxygen_gym.eval.__file__).parent == ROOT / "eval"


def test_every_package_folder_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = cfg["package-dir"]
    listed = set(cfg["packages"])
    for top, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            name = ".".join([top, *rel.parts]) if rel.parts else top
            assert name in listed, f"{name} ({init.parent}) is missing from [tool.setuptools].packages"


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
    assert not tops & {"envs", "policies", "eval", "tests"}, tops
    names = zipfile.ZipFile(wheel).namelist()
    for sub in ("policies", "envs", "eval"):
        assert f"oxygen_gym/{sub}/__init__.py" in names


def test_cli_unknown_and_missing_subcommands(capsys):
    from oxygen_gym.cli import main

    assert main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err
    assert main([]) == 2
