"""The README's "use it in your own loop" example runs as written."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_loop_example_runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use it in your own loop", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "loop.py"
    script.write_text(code)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # see conftest: shared cores
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "narrate" in proc.stdout


def test_readme_opens_with_the_two_setup_commands():
    lines = [l for l in (ROOT / "README.md").read_text().splitlines() if l.strip()]
    block = lines[lines.index("```bash") + 1 : lines.index("```bash") + 3]
    assert [l.split("#")[0].strip() for l in block] == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
