"""Test-split evaluation: accuracy, macro-F1 and loss (classification); MSE (regression)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from fedsample.training.functional import Params, per_sample_losses


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> float:
    """Unweighted mean over classes present in y_true or y_pred of F1 = 2TP / (2TP + FP + FN)."""
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, average="macro", labels=np.arange(num_classes), zero_division=0))


@torch.no_grad()
def evaluate(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, task: str, num_classes: int, batch: int = 4096) -> dict:
    losses, preds = [], []
    for start in range(0, len(y), batch):
        xb, yb = x[start : start + batch], y[start : start + batch]
        losses.append(per_sample_losses(module, params, xb, yb, task))
        if task != "regression":
            preds.append(functional_call(module, params, (xb,)).argmax(dim=1))
    loss = float(torch.cat(losses).mean())
    if task == "regression":
        return {"loss": loss, "mse": loss}
    pred = torch.cat(preds).numpy()
    truth = y.numpy()
    return {"accuracy": float((pred == truth).mean()), "macro_f1": macro_f1(truth, pred, num_classes), "loss": loss}
