"""``ntk-alignment-speed`` (seed 000, Fig 2) at a size the test suite can afford."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.experiments import registry
from paramsym.experiments.ntk_alignment import (
    AlignmentSpeedConfig,
    alignment_data,
    halving_time,
    run_alignment_speed,
)
from paramsym.experiments.registry import SilentProgress

SMALL = AlignmentSpeedConfig(runs=6, width=32, train_samples=400, alignment_samples=100, epochs=4)


def test_registered_with_the_papers_settings():
    experiment = registry.get("ntk-alignment-speed")
    assert experiment.seed_ref.startswith("seed 000")
    paper = experiment.presets["paper"]
    assert (paper.dataset, paper.runs, paper.width, paper.epochs) == (
        "fashion_mnist",
        1000,
        1024,
        100,
    )
    assert (paper.learning_rate, paper.momentum, paper.batch_size) == (1.0, 0.9, 128)
    assert (paper.train_samples, paper.alignment_samples) == (5000, 1000)


def test_halving_time_is_the_first_checked_step_below_half_the_initial_loss():
    x, y = alignment_data(SMALL)
    config = dataclasses.replace(SMALL, learning_rate=0.5, momentum=0.0, batch_size=100)
    model = ps.mlp([x.shape[1], 16, 10], "relu", seed=1)
    copy = ps.mlp([x.shape[1], 16, 10], "relu", seed=1)
    epochs = halving_time(model, x, y, config, torch.Generator().manual_seed(3))
    assert math.isfinite(epochs)

    # Oracle: replay the same SGD steps by hand and find the first step below half.
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(copy.parameters(), lr=0.5)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        initial = float(loss_fn(copy(x), y))
    step, found = 0, None
    while found is None:
        order = torch.randperm(x.shape[0], generator=generator)
        for start in range(0, x.shape[0], 100):
            batch = order[start : start + 100]
            optimizer.zero_grad()
            loss_fn(copy(x[batch]), y[batch]).backward()
            optimizer.step()
            step += 1
            if float(loss_fn(copy(x), y).detach()) < 0.5 * initial:
                found = step
                break
    assert epochs == found / 4  # 400 samples, batch 100: 4 steps per epoch


def test_a_run_that_never_halves_is_nan():
    x, y = alignment_data(SMALL)
    config = dataclasses.replace(SMALL, learning_rate=0.0, epochs=1)
    model = ps.mlp([x.shape[1], 8, 10], "relu", seed=0)
    assert math.isnan(halving_time(model, x, y, config, torch.Generator().manual_seed(0)))


def test_small_run_records_alignment_of_each_initialisation():
    result = run_alignment_speed(SMALL, SilentProgress())
    runs = result.series["runs"]
    assert len(runs["alignment"]) == len(runs["halving_epoch"]) == SMALL.runs
    assert result.metrics["runs"] == SMALL.runs
    # Run 0's alignment is loss_alignment at that initialisation, recomputed here.
    x, y = alignment_data(SMALL)
    model = ps.mlp(
        [x.shape[1], SMALL.width, SMALL.width, 10],
        "relu",
        bias=False,
        parameterization="ntk",
        seed=0,
    )
    subset = (x[: SMALL.alignment_samples], y[: SMALL.alignment_samples])
    expected = ps.loss_alignment(model, nn.CrossEntropyLoss(), subset, learning_rate=1.0)
    assert runs["alignment"][0] == pytest.approx(expected, rel=1e-6)
    assert all(a > 0 for a in runs["alignment"])


def test_unknown_dataset_is_a_clear_error():
    with pytest.raises(ps.InvalidArgumentError, match="dataset must be 'digits'"):
        alignment_data(dataclasses.replace(SMALL, dataset="cifar"))
