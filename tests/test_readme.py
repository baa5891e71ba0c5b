"""The README's ten-line example runs and prints what it says."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example(capsys):
    block = re.search(r"## Ten lines\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    exec(compile(block.group(1), "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert "rescaling[0->2]" in lines[0]
    assert "permutation[2->4]" in lines[0]
    assert lines[1] == "True"
    assert lines[2] == "8"
    assert lines[3].startswith("EigenResult(eigenvalues=[")
