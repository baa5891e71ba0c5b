"""The built distribution: `python -m build` makes an sdist and a wheel, and the wheel, installed in
a clean virtual environment, imports, ships its `py.typed` marker and its `paramsym` command.

The test builds from a copy of the source tree (so the shared tree's `build/` and `*.egg-info`
are left alone) with `--no-isolation`: the build backend (setuptools) and `build` come from the
running environment (both are in the `dev` extra), so building needs no network. The whole
test takes about 25 s (build 4 s, venv with pip 4 s, three imports of torch).

The fresh venv gets the wheel with `--no-deps`, and a `.pth` file that puts the running
interpreter's site-packages after its own: the dependencies (the pinned CPU torch wheel alone is
hundreds of MB) are not downloaded or installed again. This test checks the wheel's own contents
and entry points, not dependency resolution. The `.pth` file only appends directories to
`sys.path`; the `.pth` files inside them (among them the editable install's, which points at
`src/`) are not processed, and the venv's own site-packages comes first, so `paramsym` is
imported from the installed wheel, which the test asserts.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import paramsym
from paramsym.experiments import registry

pytest.importorskip("build", reason="`build` is in the dev extra: pip install -e '.[dev]'")

REPO = Path(__file__).resolve().parents[1]
# Never copied into the build tree: environments, caches, earlier build outputs.
IGNORED = (
    ".git",
    ".venv*",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    "build",
    "dist",
    "runs",
    "site",
    "*.egg-info",
)


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120):
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} failed ({result.returncode}):\n"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    )
    return result


def _dependency_dirs() -> list[str]:
    """The running interpreter's site-packages directories (where torch and the rest live)."""
    dirs = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def _data_files(package: Path) -> list[str]:
    """The non-Python files of a package directory, relative to it."""
    return sorted(
        f.relative_to(package).as_posix()
        for f in package.rglob("*")
        if f.is_file() and f.suffix not in (".py", ".pyc") and "__pycache__" not in f.parts
    )


def test_wheel_installs_in_a_clean_venv(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*IGNORED))
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), "."], cwd=source)
    wheels = sorted(dist.glob("paramsym-*.whl"))
    sdists = sorted(dist.glob("paramsym-*.tar.gz"))
    assert len(wheels) == 1, f"expected one wheel in {dist}: {sorted(dist.iterdir())}"
    assert len(sdists) == 1, f"expected one sdist in {dist}: {sorted(dist.iterdir())}"

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=tmp_path,
    ).stdout.strip()
    deps = _dependency_dirs()
    assert deps, "the running interpreter has no site-packages to lend the test venv"
    (Path(purelib) / "_paramsym_test_dependencies.pth").write_text("\n".join(deps) + "\n")

    # The subprocesses run outside the repository, without PYTHONPATH or PIP_* settings from
    # the calling shell, so nothing but the installed wheel can provide `paramsym`.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PIP_")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    _run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index",
         "--disable-pip-version-check", str(wheels[0])],
        cwd=tmp_path,
        env=env,
    )  # fmt: skip

    probe = (
        "import importlib.metadata as md, json, pathlib, paramsym, torch\n"
        "p = pathlib.Path(paramsym.__file__).resolve().parent\n"
        "print(json.dumps({'version': paramsym.__version__, 'file': str(p),\n"
        "    'dist': md.version('paramsym'), 'typed': (p / 'py.typed').is_file(),\n"
        "    'data': sorted(f.relative_to(p).as_posix() for f in p.rglob('*')\n"
        "                   if f.is_file() and f.suffix not in ('.py', '.pyc')),\n"
        "    'scripts': [e.value for e in md.entry_points(group='console_scripts')\n"
        "                if e.name == 'paramsym']}))\n"
    )
    out = json.loads(_run([str(python), "-c", probe], cwd=tmp_path, env=env).stdout)
    installed = Path(out["file"])
    assert installed.is_relative_to(env_dir.resolve()), f"paramsym imported from {installed}"
    assert not installed.is_relative_to(REPO), f"paramsym imported from the source tree {installed}"
    assert out["version"] == paramsym.__version__
    assert out["dist"] == paramsym.__version__
    assert out["typed"], f"py.typed is missing from the installed package {installed}"
    assert out["scripts"] == ["paramsym.cli:main"]
    # Every data file of the source package (read at run time via Path(__file__), like
    # experiments/quick_times.json) must be in the wheel: see package-data in pyproject.toml.
    missing_data = sorted(set(_data_files(REPO / "src" / "paramsym")) - set(out["data"]))
    assert not missing_data, f"the wheel lacks these files of src/paramsym: {missing_data}"

    command = env_dir / "bin" / "paramsym"
    assert command.is_file(), "the wheel installed no `paramsym` command"
    version = _run([str(command), "--version"], cwd=tmp_path, env=env).stdout
    assert paramsym.__version__ in version
    listing = _run([str(command), "list"], cwd=tmp_path, env={**env, "COLUMNS": "200"}).stdout
    missing = [e.name for e in registry.library_experiments() if e.name not in listing]
    assert not missing, f"`paramsym list` of the installed wheel lacks {missing}:\n{listing}"
