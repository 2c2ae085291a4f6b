"""Test-split evaluation: accuracy, macro-F1 and loss (classification); MSE (regression)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from fedsample.training.functional import Params, losses_of_outputs

__all__ = ["evaluate", "macro_f1"]


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> float:
    """Unweighted mean over the ``num_classes`` labels of F1 = 2TP / (2TP + FP + FN), 0 for a label that is
    neither true nor predicted (scikit-learn's ``f1_score(average="macro", labels=range(C), zero_division=0)``,
    computed with numpy so that evaluation does not import scikit-learn)."""
    y_true, y_pred = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
    tp = np.bincount(y_true[y_true == y_pred], minlength=num_classes)[:num_classes]
    denominator = np.bincount(y_true, minlength=num_classes)[:num_classes] + np.bincount(y_pred, minlength=num_classes)[:num_classes]
    f1 = np.divide(2.0 * tp, denominator, out=np.zeros(num_classes), where=denominator > 0)
    return float(f1.mean())


@torch.no_grad()
def evaluate(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, task: str, num_classes: int, batch: int = 4096) -> dict[str, float]:
    """Test metrics with the module in eval mode (dropout off), its training flag restored afterwards."""
    was_training = module.training
    module.eval()
    try:
        return _metrics(module, params, x, y, task, num_classes, batch)
    finally:
        module.train(was_training)


def _metrics(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, task: str, num_classes: int, batch: int) -> dict[str, float]:
    """Each test batch goes forward once: its outputs give both the losses and the predicted labels."""
    losses, preds = [], []
    for start in range(0, len(y), batch):
        out = functional_call(module, params, (x[start : start + batch],))
        losses.append(losses_of_outputs(out, y[start : start + batch], task))
        if task != "regression":
            preds.append(out.argmax(dim=1))
    loss = float(torch.cat(losses).mean())
    if task == "regression":
        return {"loss": loss, "mse": loss}
    pred = torch.cat(preds).cpu().numpy()
    truth = y.cpu().numpy()
    return {"accuracy": float((pred == truth).mean()), "macro_f1": macro_f1(truth, pred, num_classes), "loss": loss}
