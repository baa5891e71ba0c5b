"""The README's examples run and print what they say."""

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
    ten_lines, graph, data_dependent, ntk, teleport, symo, connectivity = run_blocks(capsys)
    assert "rescaling[0->2]" in ten_lines[0]
    assert "permutation[2->4]" in ten_lines[0]
    assert ten_lines[1] == "True"
    assert ten_lines[2] == "8"
    assert ten_lines[3].startswith("EigenResult(eigenvalues=[")
    assert graph[0] == (
        "['attention_QK[encoder.layer.0.attention.self.head0]', "
        "'attention_QK[encoder.layer.0.attention.self.head1]']"
    )
    assert graph[1] == "True"
    exact, rank, change = data_dependent[0].split()
    assert (exact, rank) == ("False", "16")
    assert float(change) > 0
    assert ntk[0] == "torch.Size([100, 100]) 16 max(m·O, P)·eps·σ_max"
    assert ntk[1] == "True 8"
    assert 0 < float(ntk[2]) < 1
    names, gain, guarded = teleport[0].rsplit(" ", 2)
    assert names == "['rescaling[0->2]', 'rescaling[2->4]']"
    assert float(gain) > 1.05
    assert guarded == "True"
    assert teleport[1] == "[0, 50]"
    factors, rest = symo[0].split(" ", 1)
    surrogate, symo_loss = rest.rsplit(" ", 1)
    assert int(factors) > 0
    assert surrogate == "torch.Size([14, 14])"
    assert float(symo_loss) < 0.1
    barrier_before, barrier_after, distance = map(float, connectivity[0].split())
    assert barrier_before > 1e-3
    assert barrier_after < 1e-12
    assert distance == 0.0
