"""Write the experiments gallery from the experiment registry.

Used two ways:

* as a mkdocs hook (``hooks: [docs/gen_gallery.py]`` in ``mkdocs.yml``): at build time it adds
  the generated page ``experiments.md`` to the site, so the gallery is never out of date;
* as a script, ``python docs/gen_gallery.py [OUT.md]``, which prints (or writes) the page.
"""

from __future__ import annotations

import sys
from typing import Any

GALLERY_PATH = "experiments.md"

INTRO = """\
# Experiments gallery

Every registered experiment of `paramsym.experiments` (this page is generated from the
registry when the site is built; `paramsym list` prints the same list). Each one reproduces a
figure or table of a seed paper, states the paper's claims and checks them against what it
measures. Run one with `paramsym run NAME` (add `--preset paper` for the paper's sizes), or
all of them with `paramsym reproduce --preset quick`; see
[Reproducing the papers](guide/reproducing.md) for the options and the measured outcomes.
"""


def _cell(text: Any) -> str:
    """Text safe for one cell of a markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


def render() -> str:
    """The gallery page as markdown, one section per registered experiment."""
    from paramsym.experiments.registry import SEED_TITLES, by_paper, library_experiments

    experiments = library_experiments()
    papers = by_paper(experiments)
    lines = [INTRO, f"{len(experiments)} experiments, by paper:", ""]
    for paper, group in papers.items():
        title = f"{paper}: {SEED_TITLES[paper]}" if paper in SEED_TITLES else paper
        lines += [f"- **{title}**"]
        lines += [f"    - [`{e.name}`](#{e.name}): {_cell(e.seed_ref)}" for e in group]
    lines.append("")
    for paper, group in papers.items():
        title = f"{paper}: {SEED_TITLES[paper]}" if paper in SEED_TITLES else paper
        lines += [f"## {title}", ""]
        lines += _sections(group)
    return "\n".join(lines)


def _sections(experiments: list[Any]) -> list[str]:
    """One section per experiment: reference, data, description, command, claims."""
    lines: list[str] = []
    for e in experiments:
        lines += [
            f"### `{e.name}` {{#{e.name}}}",
            "",
            f"**Reproduces:** {e.seed_ref}  ",
            f"**Data:** {e.data}",
            "",
            " ".join(e.description.split()),
            "",
            "```bash",
            f"paramsym run {e.name}",
            "```",
            "",
        ]
        if e.claims:
            lines += ["| claim | source | expected |", "|---|---|---|"]
            lines += [
                f"| {_cell(c.text)} | {_cell(c.source)} | {_cell(c.expected)} |" for c in e.claims
            ]
            lines.append("")
    return lines


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated gallery page to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, GALLERY_PATH, content=render()))
    return files


if __name__ == "__main__":
    page = render()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as out:
            out.write(page)
    else:
        print(page)
