"""The README's example runs and prints what it says (the documentation pages' examples are
checked in tests/test_docs.py)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def run_blocks(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    outputs = []
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
        outputs.append(capsys.readouterr().out.splitlines())
    return outputs


def test_readme_examples(capsys):
    ten_lines, teleport, equivariance, discovery = run_blocks(capsys)
    assert teleport == ["True transport True"]
    assert equivariance == ["True True"]
    assert discovery == ["9 True", "0 0 True"]
    assert "rescaling[0->2]" in ten_lines[0]
    assert "permutation[2->4]" in ten_lines[0]
    assert ten_lines[1] == "True"
    assert ten_lines[2] == "8"
    assert ten_lines[3].startswith("EigenResult(eigenvalues=[")
