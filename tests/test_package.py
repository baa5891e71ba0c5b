"""Package layout: no top-level name hides a subpackage (``import paramsym.x.y as m`` works)."""

from __future__ import annotations

import importlib
import pkgutil

import paramsym


def test_no_public_name_shadows_a_submodule():
    """``ps.teleport`` (a function) next to a ``paramsym/teleport/`` package would make
    ``import paramsym.teleport.engine as m`` fail; torch moved ``torch.fft`` for this reason."""
    for info in pkgutil.walk_packages(paramsym.__path__, "paramsym."):
        module = importlib.import_module(info.name)
        parent, _, leaf = info.name.rpartition(".")
        attribute = getattr(importlib.import_module(parent), leaf, module)
        assert attribute is module, f"{info.name} is {attribute!r}, not the module"


def test_every_module_imports_as_a_dotted_alias():
    for info in pkgutil.walk_packages(paramsym.__path__, "paramsym."):
        module = importlib.import_module(info.name)
        exec(f"import {info.name} as alias", namespace := {})
        assert namespace["alias"] is module
