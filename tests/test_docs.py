"""The documentation site builds without warnings, documents the whole public API, lists every
experiment, and its examples run and print what they say."""

import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

import paramsym
from paramsym.experiments import registry
from paramsym.experiments.registry import library_experiments

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built with ``mkdocs build --strict`` (any warning fails the build)."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_api_reference_documents_every_public_name(site):
    html = "".join(p.read_text() for p in (site / "reference").rglob("*.html"))
    missing = [name for name in paramsym.__all__ if f'id="paramsym.{name}"' not in html]
    assert not missing


def test_gallery_lists_every_experiment(site):
    html = (site / "experiments" / "index.html").read_text()
    text = " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())
    experiments = library_experiments()  # the docs build sees no test-registered ones
    assert len(experiments) >= 30
    for experiment in experiments:
        assert f'id="{experiment.name}"' in html
        assert f"paramsym run {experiment.name}" in text
        for claim in experiment.claims:
            assert " ".join(claim.source.split()) in text
            assert " ".join(claim.expected.split()) in text
            assert " ".join(claim.text.split()) in text


def test_every_page_is_in_the_site(site):
    for page in PAGES:
        stem = page.removesuffix(".md").removesuffix("index")
        assert (site / stem / "index.html").exists(), page


def test_readme_links_into_the_docs():
    links = re.findall(r"\]\(((?:docs/)[^)#]+)", (ROOT / "README.md").read_text())
    assert len(links) >= 8
    assert all((ROOT / link).exists() for link in links), links


# -- the python blocks of every page run, and print what the page says ---------------------------


def run_blocks(page, capsys):
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    outputs = []
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), {})
        outputs.append(capsys.readouterr().out.splitlines())
    return outputs


def check_ten_lines(outputs):
    (ten_lines,) = outputs
    assert "rescaling[0->2]" in ten_lines[0]
    assert "permutation[2->4]" in ten_lines[0]
    assert ten_lines[1] == "True"
    assert ten_lines[2] == "8"
    assert ten_lines[3].startswith("EigenResult(eigenvalues=[")


def check_catalogue(outputs):
    data_dependent, graph, decoders, audit, local = outputs
    assert audit == ["True 0 True"]
    assert local == ["0 ['dense', 'linear']"]
    assert decoders[0] == "called with use_cache=False: t"
    assert decoders[1] == (
        "attention_QK_rotary[layers.0.self_attn.kv_head0] (C*)^4 8 ((0, 4), (1, 5))"
    )
    assert decoders[2] == (
        "['head_permutation[layers.0.self_attn.kv_head0]', "
        "'head_permutation[layers.0.self_attn.kv_head1]', 'head_permutation[layers.0.self_attn]']"
    )
    exact, rank, change = data_dependent[0].split()
    assert (exact, rank) == ("False", "16")
    assert float(change) > 0
    assert graph[0] == (
        "['attention_QK[encoder.layer.0.attention.self.head0]', "
        "'attention_QK[encoder.layer.0.attention.self.head1]']"
    )
    assert graph[1] == "True"


def check_ntk(outputs):
    ntk, keyword_inputs = outputs
    assert ntk[0] == "torch.Size([100, 100]) 16 max(m·O, P)·eps·σ_max"
    assert ntk[1] == "True 8"
    assert 0 < float(ntk[2]) < 1
    assert keyword_inputs == ["torch.Size([3, 3])"]


def check_teleportation(outputs):
    (teleport,) = outputs
    names, gain, guarded = teleport[0].rsplit(" ", 2)
    assert names == "['rescaling[0->2]', 'rescaling[2->4]']"
    assert float(gain) > 1.05
    assert guarded == "True"
    assert teleport[1] == "[0, 50]"


def check_curvature(outputs):
    (symo,) = outputs
    factors, rest = symo[0].split(" ", 1)
    surrogate, symo_loss = rest.rsplit(" ", 1)
    assert int(factors) > 0
    assert surrogate == "torch.Size([14, 14])"
    assert float(symo_loss) < 0.1


def check_equivariance(outputs):
    user_defined, applications = outputs
    assert user_defined == [
        "True ['consistency', 'item1', 'item2a', 'item2b_gg', 'item2b_mixed']",
        "EquivarianceError",
    ]
    assert applications == ["3 True True", "21 True"]


def check_reproducing(outputs):
    assert outputs == [["last value 0.0625 True", "last value 0.25 False"]]


def check_connectivity(outputs):
    (connectivity,) = outputs
    barrier_before, barrier_after, distance = map(float, connectivity[0].split())
    assert barrier_before > 1e-3
    assert barrier_after < 1e-12
    assert distance == 0.0


def check_merging(outputs):
    (merging,) = outputs
    groups, before, after = merging[0].rsplit(" ", 2)
    assert "('heads', 2)" in groups
    assert "('orthogonal'" in groups
    assert float(after) < float(before)
    change, kind = merging[1].split()
    assert float(change) < 1e-5  # float32
    assert kind == "GPT2LMHeadModel"


def check_quantization(outputs):
    (page,) = outputs
    groups, change = page[0].rsplit(" ", 1)
    assert "rescaling[0->2]" in groups
    assert float(change) < 1e-5  # float32
    before, after = map(float, page[1].split())
    assert after < 0.8 * before


def check_discovery(outputs):
    model, data_dependent, learned = outputs
    assert model == [
        "11 determined channels",
        "norm_scaling[conv1->bn1] 4 False",
        "rescaling[bn1->conv2] 4 True",
        "rescaling[conv2->fc] 4 True",
        "batchnorm_scaling[conv1->bn1] 4 False",
        "translation[fc] 5 False",
    ]
    assert data_dependent == ["12"]
    assert learned == ["True"]


CHECKS = {
    "getting-started.md": check_ten_lines,
    "guide/catalogue.md": check_catalogue,
    "guide/ntk.md": check_ntk,
    "guide/teleportation.md": check_teleportation,
    "guide/curvature.md": check_curvature,
    "guide/connectivity.md": check_connectivity,
    "guide/reproducing.md": check_reproducing,
    "guide/equivariance.md": check_equivariance,
    "guide/discovery.md": check_discovery,
    "guide/merging.md": check_merging,
    "guide/quantization.md": check_quantization,
}


@pytest.mark.parametrize("page", PAGES)
def test_page_examples(page, capsys, monkeypatch):
    # a page may register an experiment: keep it out of the registry the other tests see
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    outputs = run_blocks(page, capsys)
    if page in CHECKS:
        CHECKS[page](outputs)
    else:
        assert not outputs, f"docs/{page} has python blocks: add a check to CHECKS"


def test_checked_pages_exist():
    assert set(CHECKS) <= set(PAGES)
