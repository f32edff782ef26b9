"""The engine reaches a model only through its interface (oxygen_gym/engine/model_api.py): no module of the engine
package imports a model family, and a family plugs in by implementing `EngineModel`."""
import ast
from pathlib import Path

import pytest

import oxygen_gym.engine
from oxygen_gym.engine.model_api import EngineModel
from oxygen_gym.model import PI05Model, build_model

ENGINE = Path(oxygen_gym.engine.__file__).parent


def _imports(path: Path) -> list[str]:
    """Absolute names of everything `path` imports (relative imports resolved against oxygen_gym.engine)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "oxygen_gym.engine".split(".")[: 2 - max(node.level - 1, 0)] if node.level else []
            out.append(".".join([*base, node.module or ""]).strip("."))
    return out


@pytest.mark.parametrize("path", sorted(ENGINE.glob("*.py")), ids=lambda p: p.name)
def test_engine_modules_import_no_model_family(path):
    bad = [name for name in _imports(path) if name.startswith(("oxygen_gym.model", "oxygen_gym.policies"))]
    assert not bad, f"{path.name} imports {bad}: the engine may only use model_api.py's interface"


def test_imports_are_resolved_as_python_does():
    """The check above must see a relative import of the model package (`from ..model.x import y`)."""
    tree = "from ..model.pi05 import PI05Model\nfrom .slots import SlotPool\nimport torch\n"
    probe = ENGINE / "_probe_for_test.py"
    probe.write_text(tree)
    try:
        assert _imports(probe) == ["oxygen_gym.model.pi05", "oxygen_gym.engine.slots", "torch"]
    finally:
        probe.unlink()


def test_pi05_is_an_engine_model_and_a_family_missing_a_method_cannot_be_built():
    model = build_model("tiny", seed=0)
    assert isinstance(model, EngineModel) and list(model.action_heads) == ["actions"]
    assert model.kv_layout.layers == model.config.vlm.depth

    class Incomplete(EngineModel):  # a family that forgot the decode step (and the rest)
        pass

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
    assert issubclass(PI05Model, EngineModel)
