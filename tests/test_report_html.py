"""runs/index.html as a browser shows it: headless Chromium renders a small runs directory.

Needs Debian's ``chromium`` (``make chromium``; ``make test`` installs it). Without it the test
fails rather than skips, so that the page is never left untested.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import matplotlib.image
import matplotlib.pyplot as plt
import pytest

import experiments_for_tests  # noqa: F401  (registers "test-counter")
from paramsym.experiments import registry
from paramsym.experiments.registry import ClaimTally
from paramsym.report import save_figure, write_index
from paramsym.report_html import chapter_of
from paramsym.sweep import run_experiment

VOID = {"img", "br", "meta", "input", "link", "hr", "source", "wbr"}


@dataclass
class Node:
    """An element of the dumped DOM."""

    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()

    def having(self, cls: str) -> list[Node]:
        return [n for n in self.iter() if cls in n.attrs.get("class", "").split()]

    def tags(self, tag: str) -> list[Node]:
        return [n for n in self.iter() if n.tag == tag]

    def all_text(self) -> str:
        return "".join(self.text) + "".join(c.all_text() for c in self.children)


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                break

    def handle_data(self, data):
        self.stack[-1].text.append(data)


def chromium(profile: Path, *args: str) -> str:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail(
            "chromium is not installed: run `make chromium` (Debian's chromium package), "
            "which `make test` does first",
            pytrace=False,
        )
    command = [binary, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run"]
    command += ["--hide-scrollbars", f"--user-data-dir={profile}", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dom(profile: Path, url: str) -> Node:
    builder = TreeBuilder()
    builder.feed(chromium(profile, "--virtual-time-budget=3000", "--dump-dom", url))
    return builder.root


def fake_run(
    root: Path, name: str, seed_ref: str, holds: list[bool | None], figure: str, width: float = 3
) -> None:
    """A run directory as `paramsym run` writes it, with a tiny figure and its CSV."""
    directory = root / name / "20260102-000000"
    directory.mkdir(parents=True)
    plot, axes = plt.subplots(figsize=(width, 2))
    axes.plot([0, 1, 2], [1.0, 0.2, 0.1])
    axes.set_title(name)
    save_figure(plot, directory / figure)
    stem = Path(figure).stem
    (directory / f"{stem}.csv").write_text("step,loss\n0,1.0\n1,0.2\n2,0.1\n")
    (directory / "config.json").write_text(json.dumps({"experiment": name}))
    (directory / "report.md").write_text(f"# {name}\n")
    claims = [
        {
            "claim": f"{name} claim {i}",
            "source": seed_ref,
            "expected": "e",
            "measured": i,
            "holds": h,
        }
        for i, h in enumerate(holds)
    ]
    metrics = {"experiment": name, "seed_ref": seed_ref, "preset": "quick", "seeds": [0]}
    metrics |= {"metrics": {}, "claims": claims, "figures": [figure], "series": [stem]}
    (directory / "metrics.json").write_text(json.dumps(metrics))


def paper(name: str) -> str:
    try:
        return registry.paper_of(registry.get(name))
    except Exception:
        return registry.OTHER_PAPER


def test_index_renders_grouped_claims_figures_and_the_failing_filter(tmp_path):
    runs = tmp_path / "runs"
    counter = registry.get("test-counter")  # two claims that hold, under "other"
    run_experiment(counter, counter.config("quick"), runs / "test-counter" / "20260101-000000")
    library = registry.library_experiments()
    chaptered = next(e for e in library if chapter_of(registry.reference_of(e)))
    plain = next(
        e
        for e in library
        if registry.paper_of(e) not in (registry.paper_of(chaptered), registry.OTHER_PAPER)
        and chapter_of(registry.reference_of(e)) is None
    )
    fake_run(runs, chaptered.name, chaptered.seed_ref, [True, False, None], "curves.png")
    fake_run(runs, plain.name, plain.seed_ref, [True, True], "spectrum_fit.png", width=9)
    fake_run(runs, "ghost-experiment", "nowhere", [False], "loss curve.png")  # not registered
    page = write_index(runs, skipped={"needs-data": "mnist files missing"})

    metrics = {
        m["experiment"]: m
        for m in (json.loads(p.read_text()) for p in runs.glob("*/*/metrics.json"))
    }
    tallies = {n: ClaimTally.of(c["holds"] for c in m["claims"]) for n, m in metrics.items()}
    profile = tmp_path / "profile"
    root = dom(profile, page.as_uri())
    body = root.tags("body")[0]

    # every figure is there and decoded; every link leads to a file of the run
    images = root.tags("img")
    assert len(images) == sum(len(m["figures"]) for m in metrics.values()) == 4
    for image in images:
        assert (runs / unquote(image.attrs["src"])).is_file(), image.attrs["src"]
        assert image.attrs["alt"]
    assert body.attrs["data-images"] == body.attrs["data-images-loaded"] == "4"
    links = {
        unquote(a.attrs["href"]) for a in root.tags("a") if not a.attrs["href"].startswith("#")
    }
    assert all((runs / link).is_file() for link in links), links
    for directory in (p.parent for p in runs.glob("*/*/metrics.json")):
        for wanted in ["report.md", "config.json", *(p.name for p in directory.glob("*.csv"))]:
            assert directory.relative_to(runs).joinpath(wanted).as_posix() in links, wanted

    # figures sit beside their claims, each captioned with its file name
    for section in root.having("experiment"):
        name = section.attrs["id"]
        assert len(section.having("claim")) == len(metrics[name]["claims"])
        figures = section.tags("figure")
        assert [f.tags("img")[0].attrs["alt"] for f in figures] == metrics[name]["figures"]
        for figure in figures:
            assert figure.tags("img")[0].attrs["alt"] in figure.tags("figcaption")[0].all_text()
        wide = [
            f.tags("img")[0].attrs["alt"] for w in section.having("wide") for f in w.tags("figure")
        ]
        assert wide == (["spectrum_fit.png"] if name == plain.name else [])  # below, not beside
        holding, total = tallies[name].holding, tallies[name].total
        assert f"{holding} of {total} claims hold" in section.tags("h4")[0].all_text()

    # the summary lines count what the metrics.json files say, per page, paper and chapter
    def counted(node: Node) -> tuple[int, int, int]:
        summary = node.having("summary")[0]
        shown = tuple(int(summary.attrs[f"data-{k}"]) for k in ("holding", "failing", "total"))
        assert f"{shown[0]} of {shown[2]} claims hold" in summary.all_text()
        return shown

    def expected(names) -> tuple[int, int, int]:
        chosen = [tallies[n] for n in names]
        return (sum(t.holding for t in chosen), sum(t.failing for t in chosen),
                sum(t.total for t in chosen))  # fmt: skip

    assert counted(body) == expected(metrics) == (5, 2, 8)
    assert "5 of 8 claims hold, 1 not evaluated, in 4 experiments." in body.all_text()
    groups = [g for g in root.having("paper") + root.having("chapter") if g.tag == "section"]
    assert len(groups) == 4  # three papers, one chapter (the chaptered experiment's)
    for group in groups:
        names = [s.attrs["id"] for s in group.having("experiment")]
        assert counted(group) == expected(names)
        assert len({paper(n) for n in names}) == 1
    assert {paper(n) for n in metrics} == {
        registry.paper_of(chaptered),
        registry.paper_of(plain),
        registry.OTHER_PAPER,
    }
    assert "mnist files missing" in body.all_text()

    # "only failing" (the #failing fragment ticks it on load) hides what holds
    assert set(body.attrs["data-experiments-shown"].split()) == set(metrics)
    assert body.attrs["data-claims-shown"] == "8"
    failing = dom(profile, page.as_uri() + "#failing").tags("body")[0]
    assert "only-failing" in failing.attrs["class"]
    assert set(failing.attrs["data-experiments-shown"].split()) == {
        chaptered.name,
        "ghost-experiment",
    }
    assert failing.attrs["data-claims-shown"] == "3"  # the failing two and the not evaluated one

    screenshot = tmp_path / "index.png"
    chromium(profile, f"--screenshot={screenshot}", "--window-size=1200,2000", page.as_uri())
    pixels = matplotlib.image.imread(screenshot)
    assert pixels.shape[:2] == (2000, 1200)
    assert pixels.std() > 0.05  # not a blank page
