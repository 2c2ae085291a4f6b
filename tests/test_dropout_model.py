"""The pfl-research CIFAR-10 benchmark model spec (PflCNN)."""

import pytest
import torch
from torch import nn

from fedsample import models


def test_pfl_cnn_has_the_benchmark_shape_and_parameter_count():
    module = models.model_from_name("pfl_cnn").build((3, 32, 32), 10)
    assert sum(p.numel() for p in module.parameters()) == 1_626_442  # pfl-research's CIFAR-10 model
    assert [m.p for m in module.modules() if isinstance(m, nn.Dropout)] == [0.25, 0.5]
    assert module(torch.zeros(4, 3, 32, 32)).shape == (4, 10)


def test_pfl_cnn_refuses_bad_input():
    with pytest.raises(ValueError, match="dropout"):
        models.PflCNN(dropout=(0.25, 1.0))
    with pytest.raises(ValueError, match="image inputs"):
        models.PflCNN().build((64,), 10)
