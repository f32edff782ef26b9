"""The house's layering, read from the source with ast (nothing is imported): no import cycle among the installed
modules, and the model families below the engine (they meet it in oxygen_gym/core, never import it).

The rules are the house check's (../shared/tools/house_check.py): every module of every package pyproject installs,
mapped through its package-dir; an import is any `import` / `from ... import` anywhere in the file (lazy ones in
functions too: they are dependencies all the same); `from pkg import name` depends on `pkg` and on `pkg.name` when
that is a module. A package whose `__init__` imports its own submodules is not a cycle (one `__init__` and only
modules below it)."""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]


def installed_modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for every package-dir of `root`'s pyproject (policies/ is oxygen_gym.policies, ...)."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())
    package_dir = cfg.get("tool", {}).get("setuptools", {}).get("package-dir", {"oxygen_gym": "oxygen_gym"})
    mods: dict[str, Path] = {}
    for pkg, folder in sorted(package_dir.items(), key=lambda kv: -len(kv[0])):  # the deepest mapping wins
        base = root / (folder or ".")
        for f in sorted(base.rglob("*.py")):
            parts = list(f.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods.setdefault(".".join([pkg, *parts]), f)
    return mods


def imports_of(f: Path, name: str, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (file `f`) imports, relative imports resolved."""
    tree = ast.parse(f.read_text(), str(f))
    here = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out & known


def import_graph(root: Path) -> tuple[nx.DiGraph, dict[str, Path]]:
    mods = installed_modules(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for name, f in mods.items():
        graph.add_edges_from((name, m) for m in imports_of(f, name, set(mods)) if m != name)
    return graph, mods


def import_cycles(root: Path) -> list[list[str]]:
    """Strongly connected sets of modules, each sorted, except a package with the submodules its __init__ imports."""
    graph, mods = import_graph(root)

    def package_only(comp: set[str]) -> bool:
        inits = [m for m in comp if mods[m].name == "__init__.py"]
        return len(inits) == 1 and all(m == inits[0] or m.startswith(inits[0] + ".") for m in comp)

    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1 and not package_only(c))


def model_files_importing_the_engine(root: Path) -> dict[str, list[str]]:
    graph, mods = import_graph(root)
    out = {}
    for name in mods:
        if name == "oxygen_gym.model" or name.startswith("oxygen_gym.model."):
            up = sorted(m for m in graph.successors(name) if m == "oxygen_gym.engine" or m.startswith("oxygen_gym.engine."))
            if up:
                out[str(mods[name].relative_to(root))] = up
    return out


def _describe(cycle: list[str], graph: nx.DiGraph) -> str:
    inside = set(cycle)
    edges = [f"    {m} -> {', '.join(sorted(set(graph.successors(m)) & inside))}" for m in cycle]
    return f"  {len(cycle)} modules:\n" + "\n".join(edges)


def test_no_import_cycle_among_installed_modules():
    cycles = import_cycles(ROOT)
    graph, _ = import_graph(ROOT)
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(_describe(c, graph) for c in cycles)


def test_the_family_table_names_what_each_family_registers():
    """The `family=` names the override checks accept before any family is imported (checkpoints/family_names.py)
    are the registered families' own, in the table's order."""
    from oxygen_gym.policies.checkpoints.family_names import CHECKPOINT_FAMILY_NAMES, FAMILY_TABLE
    from oxygen_gym.policies.model_io import checkpoint_family_names, registered_families

    assert list(registered_families())[: len(FAMILY_TABLE)] == list(FAMILY_TABLE)
    assert checkpoint_family_names() == CHECKPOINT_FAMILY_NAMES


FAMILY_NAMES = ("pi05", "xr0", "starvla")  # the model families (qwen3_vl is the backbone two of them share, not one)


def family_of(module: str) -> str | None:
    """The family a module belongs to: a package named after it (oxygen_gym.model.xr0.*) or a file prefixed with it
    (policies/families/xr0/xr0_io.py, policies/families/starvla/starvla_resolve.py)."""
    parts = module.split(".")
    return next((f for f in FAMILY_NAMES if f in parts or any(p.startswith(f + "_") for p in parts)), None)


def sibling_imports(root: Path) -> list[str]:
    graph, _ = import_graph(root)
    return sorted(f"{a} -> {b}" for a, b in graph.edges() if family_of(a) and family_of(b) and family_of(a) != family_of(b))


def test_no_family_imports_a_sibling():
    """What two families share (the Qwen3-VL prefix bundle and processor, image resizing, safetensors folders, key
    errors, tokenizer files) lives below them; a family importing another would make the two one unit to change."""
    siblings = sibling_imports(ROOT)
    assert not siblings, "families importing each other (move what they share below them):\n  " + "\n  ".join(siblings)


def test_no_model_file_imports_the_engine():
    """Families implement oxygen_gym/core's contract; the engine drives them through it. A model file importing the
    engine puts the model above it."""
    up = model_files_importing_the_engine(ROOT)
    assert not up, "model files importing oxygen_gym.engine (import oxygen_gym.core instead): " + "; ".join(
        f"{f}: {', '.join(m)}" for f, m in sorted(up.items()))


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_rules_on_a_small_tree(tmp_path):
    """The checks themselves: a package importing its submodules passes; two modules importing each other (lazily,
    relatively, across a package-dir mapping) are a cycle; a model module importing the engine is named."""
    _write(tmp_path, {
        "pyproject.toml": '[tool.setuptools]\npackage-dir = { "oxygen_gym" = "oxygen_gym", '
                          '"oxygen_gym.policies" = "policies" }\n',
        "oxygen_gym/__init__.py": "from . import core\n",
        "oxygen_gym/core.py": "",
        "oxygen_gym/engine/__init__.py": "from .runner import run\n",
        "oxygen_gym/engine/runner.py": "from ..core import x\nfrom . import timing\n",  # its package: allowed
        "oxygen_gym/engine/timing.py": "",
        "oxygen_gym/model/__init__.py": "",
        "oxygen_gym/model/heads.py": "def f():\n    from ..engine.runner import run\n",
        "policies/__init__.py": "from .a import A\n",
        "policies/a.py": "from .b import B\n",
        "policies/b.py": "def g():\n    from oxygen_gym.policies.a import A\n",
    })
    assert import_cycles(tmp_path) == [["oxygen_gym.policies.a", "oxygen_gym.policies.b"]]
    assert model_files_importing_the_engine(tmp_path) == {
        "oxygen_gym/model/heads.py": ["oxygen_gym.engine.runner"]}
    _write(tmp_path, {"policies/b.py": "", "oxygen_gym/model/heads.py": "from ..core import x\n"})
    assert import_cycles(tmp_path) == [] and model_files_importing_the_engine(tmp_path) == {}


def test_the_sibling_rule_on_a_small_tree(tmp_path):
    """The sibling check itself: a family module importing another family's (lazily too) is named; both importing a
    shared module is not."""
    _write(tmp_path, {
        "pyproject.toml": '[tool.setuptools]\npackage-dir = { "oxygen_gym" = "oxygen_gym", '
                          '"oxygen_gym.policies" = "policies" }\n',
        "oxygen_gym/__init__.py": "",
        "oxygen_gym/model/__init__.py": "",
        "oxygen_gym/model/shared.py": "",
        "oxygen_gym/model/xr0/__init__.py": "",
        "oxygen_gym/model/xr0/xr0_model.py": "from ..shared import x\n",
        "oxygen_gym/model/starvla/__init__.py": "",
        "oxygen_gym/model/starvla/starvla_model.py": "from ..shared import x\n",
        "policies/__init__.py": "",
        "policies/starvla_io.py": "def f():\n    from oxygen_gym.model.xr0.xr0_model import X\n",
    })
    assert sibling_imports(tmp_path) == ["oxygen_gym.policies.starvla_io -> oxygen_gym.model.xr0.xr0_model"]
