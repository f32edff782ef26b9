"""The command line a user meets first: light parsers, `--version`, each command's own `--help`, and a checkpoint
name that is a typo refused before any work (one line, exit status 2, no output folder). How fast `--help` is gets
measured by `oxygen-gym bench cli`, not here; what is checked here is the cause: what building a parser imports."""
import json
import subprocess
import sys
from importlib.metadata import version

import pytest

from oxygen_gym.cli import build_parser, command_paths, main
from oxygen_gym.eval.bench.cli_bench import HEAVY

EVERY_PARSER = f"""
import sys
from oxygen_gym.cli import build_parser, command_paths
for words in command_paths():
    build_parser(words).format_help()
print(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r})))
"""


def test_building_every_parser_imports_nothing_heavy():
    """Every command's parser, built and its help formatted in one fresh interpreter, pulls in none of the packages
    that make start-up slow (torch, transformers, simulators, Ray, websockets, matplotlib, scipy)."""
    proc = subprocess.run([sys.executable, "-c", EVERY_PARSER], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().replace("'", '"')) == []


def test_every_command_has_a_parser_and_the_eval_targets_are_commands():
    paths = command_paths()
    assert {("eval", "libero"), ("eval", "merge"), ("bench", "cli"), ("train", "open-loop")} <= set(paths)
    for words in paths:
        assert build_parser(words).prog == " ".join(("oxygen-gym", *words))


def test_version_is_the_installed_distribution(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"oxygen-gym {version('oxygen-gym')}"


def test_eval_merge_help_lists_only_merge_flags(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "merge", "--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: oxygen-gym eval merge") and "--out" in text and "FOLDER" in text
    for libero_flag in ("--suite", "--checkpoint", "--episodes", "--replan", "--shard", "--live"):
        assert libero_flag not in text, libero_flag


def test_eval_help_lists_its_targets(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = capsys.readouterr().out
    assert all(t in text for t in ("libero", "merge")) and "--suite" not in text


@pytest.mark.parametrize("argv", [
    ["eval", "libero", "--checkpoint", "tinyy"],
    ["demo", "--checkpoint", "libero_spatial"],
])
def test_a_checkpoint_typo_is_one_line_exit_2_and_writes_nothing(argv, capsys, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--checkpoint" in err and "did you mean" in err and "Built-in models: libero-spatial" in err
    assert ("'tiny'" if "tinyy" in argv else "'libero-spatial'") in err.split("did you mean")[1]
    assert not out.exists()


@pytest.mark.parametrize("argv", [["serve", "--checkpoint", "smal"], ["inspect", "tniy"],
                                  ["bench", "live", "--checkpoint", "libero-spacial"]])
def test_other_commands_refuse_a_checkpoint_typo_while_parsing(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "did you mean" in err


def test_a_folder_a_hub_id_and_every_builtin_pass_the_name_check(tmp_path):
    from oxygen_gym.policies.checkpoints.names import builtin_model_names, checkpoint_name_problem

    for name in (str(tmp_path), "owner/name", "lerobot/pi05_libero", *builtin_model_names()):
        assert checkpoint_name_problem(name) is None, name
    assert checkpoint_name_problem(str(tmp_path / "missing" / "model")) is not None


def test_the_names_mirror_the_family_registry_and_the_shipped_models():
    """names.py keeps its own copy (it must not import torch); this is where a new built-in that was not added
    there shows up."""
    from oxygen_gym.model.trained import TRAINED_MODELS
    from oxygen_gym.policies.checkpoints import names
    from oxygen_gym.policies.model_io import registered_families

    assert {f: tuple(fam.builtins) for f, fam in registered_families().items()} == names.RANDOM_WEIGHT_MODELS
    assert tuple(TRAINED_MODELS) == names.TRAINED_MODEL_NAMES


def test_from_pretrained_names_the_builtins_and_the_closest_for_a_typo():
    from oxygen_gym import MultiTaskPolicy
    from oxygen_gym.model import CheckpointNotFoundError

    with pytest.raises(CheckpointNotFoundError) as err:
        MultiTaskPolicy.from_pretrained("smal")
    text = str(err.value)
    assert "did you mean 'small'" in text and "xr0-tiny" in text and "libero-spatial" in text


def test_bench_cli_writes_a_table_and_json(tmp_path, capsys):
    """The start-up benchmark end to end on two commands (one process each): its records, not its timings."""
    assert main(["bench", "cli", "--commands", "eval merge,inspect", "--repeats", "1", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    points = {p["command"]: p for p in results["points"]}
    assert set(points) == {"oxygen-gym eval merge --help", "oxygen-gym inspect --help"}
    for p in points.values():
        assert p["returncode"] == 0 and p["heavy_imports"] == [] and len(p["times_s"]) == 1 and p["median_s"] > 0
    assert "oxygen-gym inspect --help" in (tmp_path / "results.md").read_text()
    capsys.readouterr()
    assert main(["bench", "cli", "--commands", "eval nope", "--out", str(tmp_path / "x")]) == 2
    assert "unknown ['eval nope']" in capsys.readouterr().err and not (tmp_path / "x").exists()
