"""Experiments of seed 003 ("An Equivariance Toolbox for Learning Dynamics")."""
