"""The HTML index of a runs directory, ``runs_root/index.html`` (written by
:func:`paramsym.report.write_index`; the run-directory layout is in :mod:`paramsym.report`).

The page groups the latest run of every experiment by seed paper (:func:`registry.paper_of`
of the registered experiment; unregistered ones under :data:`registry.OTHER_PAPER`) and, in a
paper numbered by chapters (the dissertation: ``Fig 2.7``, ``§3.3.1``, ``ch. 1``), by chapter.
The page, every paper and every chapter open with a summary line (claims holding of all, not
evaluated counted apart, as :class:`ClaimTally`). Each experiment shows its claims table beside
its figures, each figure captioned, and links its report.md, config.json and CSVs.

A checkbox, or the fragment ``#failing`` in the page's URL, hides the claims that hold and the
experiments, chapters and papers all of whose claims hold. Style and script are inline: the
page opens from disk with no server and no network. Once the page has loaded, the script sets
``data-images``, ``data-images-loaded`` (images that decoded), ``data-claims-shown`` and
``data-experiments-shown`` (what the filter left visible) on ``<body>``, for tests.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from paramsym.errors import ExperimentError
from paramsym.experiments import registry
from paramsym.experiments.registry import ClaimTally
from paramsym.run_files import atomic_write_text, completed_runs, format_value

HTML_VERDICTS = {
    True: '<span class="yes">holds</span>',
    False: '<span class="no">does not hold</span>',
    None: '<span class="na">not evaluated</span>',
}
"""How index.html shows a claim's ``holds`` (None / null: the run could not evaluate it)."""

ROW_CLASSES = {True: "holds", False: "fails", None: "not-evaluated"}
"""The class of a claim's table row (the "only failing" filter hides ``tr.holds``)."""

_CHAPTER = re.compile(r"\bch\.\s*(\d+)\b|(?:\bFigs?\.?|\bTables?|§)\s*([A-Z]|\d+)\.\d")


def chapter_of(reference: str) -> str | None:
    """The chapter a figure/table reference points into, from dotted numbering.

    >>> chapter_of("Fig 2.7(a); §2.3.3"), chapter_of("Fig A.1; App. A.4"), chapter_of("Fig 2")
    ('Chapter 2', 'Appendix A', None)
    """
    match = _CHAPTER.search(reference)
    if match is None:
        return None
    part = match.group(1) or match.group(2)
    return f"Appendix {part}" if part.isalpha() else f"Chapter {part}"


def _chapter_key(chapter: str | None) -> tuple[int, int, str]:
    if chapter is None:
        return (2, 0, "")
    kind, _, part = chapter.partition(" ")
    return (0, int(part), "") if kind == "Chapter" else (1, 0, part)


@dataclass
class _Run:
    """The latest complete run of one experiment, as the page shows it."""

    name: str
    link: str  # URL of the run directory relative to the page, with a trailing "/"
    directory: Path
    metrics: dict[str, Any]
    paper: str
    chapter: str | None
    description: str
    tally: ClaimTally = field(init=False)

    def __post_init__(self) -> None:
        self.tally = ClaimTally.of(c["holds"] for c in self.metrics["claims"])


def _load(run: Path, runs_root: Path) -> _Run:
    metrics = json.loads((run / "metrics.json").read_text())
    name = str(metrics["experiment"])
    try:
        experiment = registry.get(name)
    except ExperimentError:  # a run of an experiment this installation does not register
        paper, chapter, description = registry.OTHER_PAPER, None, ""
    else:
        paper = registry.paper_of(experiment)
        chapter = (
            chapter_of(registry.reference_of(experiment)) if paper != registry.OTHER_PAPER else None
        )
        description = experiment.description
    link = quote(run.relative_to(runs_root).as_posix()) + "/"
    return _Run(name, link, run, metrics, paper, chapter, description)


def _summary(tally: ClaimTally, experiments: int | None = None) -> str:
    """``"5 of 6 claims hold, 1 not evaluated, in 2 experiments."``: a claim not evaluated
    neither holds nor fails. Without ``experiments``: ``"5 of 6 claims hold, 1 not evaluated"``."""
    text = f"{tally.holding} of {tally.total} claims hold"
    if tally.not_evaluated:
        text += f", {tally.not_evaluated} not evaluated"
    if experiments is None:
        return text
    return text + ("," if tally.not_evaluated else "") + f" in {experiments} experiments."


def _tally(runs: Iterable[_Run]) -> ClaimTally:
    tallies = [r.tally for r in runs]
    return ClaimTally(
        sum(t.holding for t in tallies),
        sum(t.failing for t in tallies),
        sum(t.not_evaluated for t in tallies),
    )


def _all_hold(tally: ClaimTally) -> bool:
    return tally.failing == 0 and tally.not_evaluated == 0


def _summary_line(tally: ClaimTally, experiments: int | None = None, tag: str = "p") -> str:
    data = (
        f'data-holding="{tally.holding}" data-failing="{tally.failing}" '
        f'data-not-evaluated="{tally.not_evaluated}" data-total="{tally.total}"'
    )
    return f'<{tag} class="summary meta" {data}>{_summary(tally, experiments)}</{tag}>'


def _caption_title(stem: str) -> str:
    return re.sub(r"[_-]+", " ", stem).strip()


def _csv_columns(path: Path) -> list[str]:
    with path.open() as file:
        header = file.readline().strip()
    return [c for c in header.split(",") if c]


WIDE = 2.2
"""A figure at least this many times wider than high (several panels side by side) spans the
width of the page below the claims table instead of sitting beside it."""


def _aspect(path: Path) -> float:
    """Width over height of a PNG (from its header), 1.0 when it is no PNG."""
    with path.open("rb") as file:
        header = file.read(24)
    if header[:8] != b"\x89PNG\r\n\x1a\n" or header[12:16] != b"IHDR":
        return 1.0
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    return width / height if height else 1.0


def _figures(run: _Run) -> tuple[str, str]:
    """Each figure as a captioned ``<figure>`` (file name, what it shows, its data file): those
    beside the claims table, and the wide ones below it."""
    beside: list[str] = []
    below: list[str] = []
    for filename in run.metrics.get("figures", []):
        href = html.escape(run.link + quote(filename))
        name = html.escape(filename)
        path = run.directory / filename
        if not path.is_file():
            beside.append(f'<p class="skip">figure {name} is missing</p>')
            continue
        stem = Path(filename).stem
        caption = f'<a href="{href}">{name}</a>: {html.escape(_caption_title(stem))}'
        data = run.directory / f"{stem}.csv"
        if data.is_file():
            columns = ", ".join(_csv_columns(data)[:6])
            caption += (
                f' (data: <a href="{html.escape(run.link + quote(data.name))}">'
                f"{html.escape(data.name)}</a>, columns {html.escape(columns)})"
            )
        (below if _aspect(path) >= WIDE else beside).append(
            f'<figure><a href="{href}"><img src="{href}" alt="{name}" loading="eager"></a>'
            f"<figcaption>{caption}</figcaption></figure>"
        )
    if not beside and not below:
        beside.append('<p class="skip">(no figures)</p>')
    return "".join(beside), "".join(below)


def _claims_table(run: _Run) -> str:
    rows = []
    for claim in run.metrics["claims"]:
        rows.append(
            f'<tr class="claim {ROW_CLASSES[claim["holds"]]}">'
            f"<td>{html.escape(str(claim['claim']))}</td>"
            f"<td>{html.escape(str(claim['source']))}</td>"
            f"<td>{html.escape(str(claim['expected']))}</td>"
            f"<td>{html.escape(format_value(claim['measured']))}</td>"
            f"<td>{HTML_VERDICTS[claim['holds']]}</td></tr>"
        )
    if not rows:
        rows.append('<tr><td colspan="5" class="skip">(no claims)</td></tr>')
    return (
        "<table class='claims'><tr><th>claim</th><th>source</th><th>expected</th>"
        "<th>measured</th><th>verdict</th></tr>" + "".join(rows) + "</table>"
    )


def _links(run: _Run) -> str:
    files = ["report.md", "config.json", *sorted(p.name for p in run.directory.glob("*.csv"))]
    return " ".join(
        f'<a href="{html.escape(run.link + quote(f))}">{html.escape(f)}</a>'
        for f in files
        if (run.directory / f).is_file()
    )


def _experiment(run: _Run) -> str:
    name = html.escape(run.name)
    hidden = " all-hold" if _all_hold(run.tally) else ""
    metrics = run.metrics
    description = f"{html.escape(run.description)}<br>" if run.description else ""
    beside, below = _figures(run)
    return (
        f'<section class="experiment{hidden}" id="{name}">'
        f"<h4>{name} <small>{_summary(run.tally)}</small></h4>"
        f'<p class="meta">{description}{html.escape(str(metrics.get("seed_ref", "")))} · '
        f"preset {html.escape(str(metrics.get('preset', '')))} · "
        f"seeds {html.escape(str(metrics.get('seeds', '')))} · "
        f'run <span class="path">{html.escape(run.directory.name)}</span><br>'
        f"files: {_links(run)}</p>"
        f'<div class="run{"" if beside else " single"}">'
        f'<div class="claims-column">{_claims_table(run)}</div>'
        f'<div class="figures">{beside}</div></div>'
        f'<div class="figures wide">{below}</div></section>'
    )


def _anchor(*parts: str) -> str:
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts)


def _paper_title(paper: str) -> str:
    if paper == registry.OTHER_PAPER:
        return "Other experiments (no seed paper)"
    title = registry.SEED_TITLES.get(paper)
    return f"{paper}: {title}" if title else paper


def _group(runs: Sequence[_Run]) -> dict[str, dict[str | None, list[_Run]]]:
    """``{paper: {chapter: runs}}``: papers as :func:`registry.by_paper` orders them, chapters
    in order (appendices after chapters), runs by name."""
    papers: dict[str, dict[str | None, list[_Run]]] = {}
    for run in sorted(runs, key=lambda r: r.name):
        papers.setdefault(run.paper, {}).setdefault(run.chapter, []).append(run)
    order = sorted(papers, key=lambda p: (p == registry.OTHER_PAPER, p))
    return {p: {c: papers[p][c] for c in sorted(papers[p], key=_chapter_key)} for p in order}


def _body(groups: Mapping[str, Mapping[str | None, list[_Run]]]) -> tuple[str, str]:
    """The overview table's rows and the sections, one per paper (and chapter)."""
    overview: list[str] = []
    sections: list[str] = []
    for paper, chapters in groups.items():
        paper_runs = [r for runs in chapters.values() for r in runs]
        tally = _tally(paper_runs)
        hidden = " all-hold" if _all_hold(tally) else ""
        anchor = _anchor("paper", paper)
        overview.append(
            f'<tr class="paper{hidden}"><td colspan="2"><a href="#{anchor}">'
            f"{html.escape(_paper_title(paper))}</a></td>"
            f"<td>{_summary_line(tally, len(paper_runs), 'span')}</td></tr>"
        )
        parts = [
            f'<section class="paper{hidden}"><h2 id="{anchor}">'
            f"{html.escape(_paper_title(paper))}</h2>{_summary_line(tally, len(paper_runs))}"
        ]
        chaptered = any(chapter is not None for chapter in chapters)
        for chapter, runs in chapters.items():
            if not chaptered:
                parts += [_experiment(run) for run in runs]
                continue
            title = chapter or "Other parts of the paper"
            chapter_tally = _tally(runs)
            chapter_hidden = " all-hold" if _all_hold(chapter_tally) else ""
            chapter_anchor = _anchor(paper, title)
            overview.append(
                f'<tr class="chapter{chapter_hidden}"><td></td>'
                f'<td><a href="#{chapter_anchor}">{html.escape(title)}</a></td>'
                f"<td>{_summary_line(chapter_tally, len(runs), 'span')}</td></tr>"
            )
            parts.append(
                f'<section class="chapter{chapter_hidden}">'
                f'<h3 id="{chapter_anchor}">{html.escape(title)}</h3>'
                f"{_summary_line(chapter_tally, len(runs))}"
                + "".join(_experiment(run) for run in runs)
                + "</section>"
            )
        sections.append("".join(parts) + "</section>")
    return "".join(overview), "".join(sections)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 2px solid #bbb; }
h3 { margin-top: 1.5em; border-bottom: 1px solid #ddd; } h4 { margin: 1.5em 0 0.3em; }
h4 small { font-weight: normal; color: #555; margin-left: 0.5em; }
table { border-collapse: collapse; width: 100%; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } .yes { color: #137333; font-weight: 600; }
.no { color: #b3261e; font-weight: 600; } .skip { color: #666; } .na { color: #888; }
tr.fails { background: #fdeeee; } tr.not-evaluated { background: #f6f6f6; }
table.overview td { border: none; padding: 0.15em 0.5em; } table.overview { width: auto; }
.run { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 1.2em;
       align-items: start; }
.run.single { grid-template-columns: minmax(0, 1fr); }
@media (max-width: 900px) { .run { grid-template-columns: minmax(0, 1fr); } }
figure { margin: 0 0 1em; } figcaption { font-size: 0.85em; color: #444; }
img { max-width: 100%; border: 1px solid #eee; }
.meta { color: #555; font-size: 0.9em; } .path { font-family: monospace; }
.controls { position: sticky; top: 0; background: #fff; padding: 0.4em 0;
            border-bottom: 1px solid #eee; z-index: 1; }
body.only-failing tr.holds, body.only-failing .all-hold { display: none; }
"""

_SCRIPT = """
(function () {
  var box = document.getElementById("only-failing");
  function apply() { document.body.classList.toggle("only-failing", box.checked); }
  box.addEventListener("change", function () {
    apply();
    try {
      history.replaceState(null, "", box.checked ? "#failing" : location.pathname);
    } catch (error) { /* some browsers refuse this on file:// pages; the filter still works */ }
  });
  if (location.hash === "#failing") { box.checked = true; }
  apply();
  window.addEventListener("load", function () {
    /* what a reader sees, for tests: images decoded, claims and experiments not hidden */
    var images = document.images, loaded = 0, shown = [], rows = 0;
    for (var i = 0; i < images.length; i++) {
      if (images[i].complete && images[i].naturalWidth > 0) { loaded++; }
    }
    document.querySelectorAll("tr.claim").forEach(function (row) {
      if (row.getClientRects().length) { rows++; }
    });
    document.querySelectorAll("section.experiment").forEach(function (section) {
      if (section.getClientRects().length) { shown.push(section.id); }
    });
    document.body.dataset.images = String(images.length);
    document.body.dataset.imagesLoaded = String(loaded);
    document.body.dataset.claimsShown = String(rows);
    document.body.dataset.experimentsShown = shown.join(" ");
  });
})();
"""


def write_index_page(runs_root: Path, skipped: Mapping[str, str] | None = None) -> Path:
    """Write ``runs_root/index.html`` (see the module docstring); return its path."""
    runs = [_load(run, runs_root) for run in completed_runs(runs_root)]
    overview, sections = _body(_group(runs))
    not_run = "".join(
        f'<tr><td>{html.escape(name)}</td><td class="skip">not run: {html.escape(reason)}</td></tr>'
        for name, reason in sorted((skipped or {}).items())
    )
    if not_run:
        not_run = f"<h2 id='not-run'>Not run</h2><table>{not_run}</table>"
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>paramsym: reproduced claims</title>"
        f"<style>{_STYLE}</style></head><body>"
        "<h1>paramsym — reproduced claims</h1>"
        f"{_summary_line(_tally(runs), len(runs))}"
        "<div class='controls'><label><input type='checkbox' id='only-failing'> "
        "Only failing: hide the claims that hold, and every experiment, chapter and paper "
        "whose claims all hold</label></div>"
        f"<table class='overview'>{overview}</table>{not_run}{sections}"
        f"<script>{_SCRIPT}</script></body></html>"
    )
    path = runs_root / "index.html"
    atomic_write_text(path, page)
    return path
