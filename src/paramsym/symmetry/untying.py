"""Untying shared parameters: each module gets its own copy (issue 45).

A tied embedding (GPT-2, Llama-3.2-1B, Qwen2.5-0.5B, Gemma: the LM head reads the token table)
is one tensor read as rows by the lookup and as columns by the head, so no map of the residual
stream can move it consistently (g on one read, g⁻ᵀ on the other): the stream's orthogonal
group, the main effect of QuaRot and SpinQuant, does not exist on the tied model. Giving the
head its own copy changes nothing about the function (the two tensors start equal) and opens
the group. :func:`untie` does this for every parameter that two different modules hold, and
on a Hugging Face model also sets ``tie_word_embeddings=False`` in its config and recomputes
its tied-weight map, so that ``save_pretrained`` writes both tensors and ``from_pretrained``
does not tie them again.

A module applied in two places (one ``nn.Linear`` object reused) is a shared layer, not a tie:
it keeps its parameters.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from torch import nn

from paramsym.core.model_checks import require_module


@dataclass
class UntieReport:
    """What :func:`untie` did.

    Attributes:
        untied: each new copy's parameter name -> the name of the parameter it was tied to
            (the one that kept the original tensor).
        config: the Hugging Face config fields set to ``False`` (``"tie_word_embeddings"``).
    """

    untied: dict[str, str] = field(default_factory=dict)
    config: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.untied:
            return "untie: no parameter was shared between modules"
        pairs = ", ".join(f"{new} (from {old})" for new, old in self.untied.items())
        return f"untie: {len(self.untied)} parameter(s) copied: {pairs}"


def untie(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in which every parameter held by more than one module is given its
    own copy in each module after the first (module docstring); the given model is unchanged.

    Returns:
        The new model, with a ``paramsym_untie`` attribute holding the :class:`UntieReport`.

    >>> import torch
    >>> class Tied(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.embed, self.head = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
    ...         self.head.weight = self.embed.weight
    >>> untied = untie(Tied())
    >>> untied.paramsym_untie.untied
    {'head.weight': 'embed.weight'}
    >>> head, embed = untied.head.weight, untied.embed.weight
    >>> head is embed, torch.equal(head, embed)
    (False, True)
    """
    require_module(model, "untie")
    new = copy.deepcopy(model)
    report = UntieReport()
    first: dict[int, str] = {}
    visited: set[int] = set()
    for module_name, module in new.named_modules():  # each module object once
        if id(module) in visited:
            continue
        visited.add(id(module))
        for name, parameter in list(module.named_parameters(recurse=False)):
            full = f"{module_name}.{name}" if module_name else name
            owner = first.setdefault(id(parameter), full)
            if owner != full:
                copied = nn.Parameter(
                    parameter.detach().clone(), requires_grad=parameter.requires_grad
                )
                setattr(module, name, copied)
                report.untied[full] = owner
    config = getattr(new, "config", None)
    if report.untied and getattr(config, "tie_word_embeddings", False):
        config.tie_word_embeddings = False  # type: ignore[union-attr]
        report.config.append("tie_word_embeddings")
    expand = getattr(new, "get_expanded_tied_weights_keys", None)
    if report.untied and callable(expand):  # transformers ≥ 5: the map save_pretrained reads
        new.all_tied_weights_keys = expand(all_submodels=True)
    new.paramsym_untie = report  # type: ignore[assignment]
    return new
