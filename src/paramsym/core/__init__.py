"""Parameter-space algebra shared by every paramsym module."""

from paramsym.core.params import (
    Params,
    add,
    axpy,
    check_finite,
    flatten,
    functional_call,
    inner,
    norm,
    params_of,
    randn_like,
    resolve_params,
    scale,
    sub,
    to_dtype,
    unflatten,
    zeros_like,
)
from paramsym.core.seeding import make_generator

__all__ = [
    "Params",
    "add",
    "axpy",
    "check_finite",
    "flatten",
    "functional_call",
    "inner",
    "make_generator",
    "norm",
    "params_of",
    "randn_like",
    "resolve_params",
    "scale",
    "sub",
    "to_dtype",
    "unflatten",
    "zeros_like",
]
