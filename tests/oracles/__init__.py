"""Test oracles: outside references that paramsym's own results are checked against."""
