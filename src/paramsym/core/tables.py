"""Long-format tables: ``{column: [value per row]}``, the shape of every history a tracker
keeps and every CSV an experiment writes (see :func:`paramsym.report.write_run_outputs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Table = dict[str, list[Any]]


def empty_table(columns: str) -> Table:
    """A table with the space-separated ``columns`` and no rows.

    >>> empty_table("run epoch loss")
    {'run': [], 'epoch': [], 'loss': []}
    """
    return {name: [] for name in columns.split()}


def append_row(table: Table, *values: Any) -> None:
    """Append one row, ``values`` in the table's column order.

    >>> table = empty_table("run loss")
    >>> append_row(table, 0, 0.5)
    >>> table
    {'run': [0], 'loss': [0.5]}
    """
    if len(values) != len(table):
        raise ValueError(
            f"a row of {len(values)} values for the {len(table)} columns {list(table)}"
        )
    for column, value in zip(table.values(), values, strict=True):
        column.append(value)


def concat_tables(tables: Sequence[Table]) -> Table:
    """Tables with the same columns, one after the other."""
    out: Table = {k: [] for k in tables[0]}
    for table in tables:
        for key in out:
            out[key] += table[key]
    return out


def table_rows(table: Table, **where: Any) -> Table:
    """The rows of ``table`` whose columns equal ``where``'s values.

    >>> table_rows({"run": [0, 1, 1], "loss": [3, 2, 1]}, run=1)
    {'run': [1, 1], 'loss': [2, 1]}
    """
    keep = [
        i
        for i in range(len(next(iter(table.values()))))
        if all(table[k][i] == v for k, v in where.items())
    ]
    return {k: [column[i] for i in keep] for k, column in table.items()}
