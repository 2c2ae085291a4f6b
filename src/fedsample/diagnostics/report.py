"""Writing a diagnosis: diagnostics.json, summary.md (the table) and the pictures."""

from __future__ import annotations

import json
from pathlib import Path

from fedsample.diagnostics.measure import Diagnosis

COLUMNS = ("bias ± SE of bias²", "variance", "MSE", "scale", "inclusion CV", "smallest/largest decile",
           "samples", "clients contacted", "kB up")


def _row(label: str, result: dict) -> list[str]:
    e, x, c = result["estimator"], result["exploitation"], result["cost"]
    deciles = x["by_size_decile"]
    ratio = deciles[0]["inclusion"] / deciles[-1]["inclusion"] if deciles[-1]["inclusion"] > 0 else float("inf")
    return [
        label, f"{e['bias']:.3f} ({e['bias_sq']:.4f} ± {e['bias_sq_se']:.4f})", f"{e['variance']:.3f}",
        f"{e['mse']:.3f}", f"{e['scale']:.3f}", f"{x['cv']:.2f}", f"{ratio:.2f}", f"{c['samples']:.1f}",
        f"{c['clients_contacted']:.0f}", f"{c['bytes_up'] / 1e3:.1f}",
    ]


def summary_table(document: dict) -> str:
    """The markdown table: per strategy the estimator's bias, variance, MSE and scale relative to g*, the
    inclusion frequency's CV and smallest/largest size-decile ratio, and the per-round cost."""
    lines = ["| strategy | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += ["| " + " | ".join(_row(label, r)) + " |" for label, r in document["strategies"].items()]
    basis = document["basis"]
    note = (f"{document['rounds']} draws at a fixed model; {document['clients']} clients, {document['samples']} samples; "
            f"gradients {basis['kind']} ({basis['dim']} of {basis['parameters']} coordinates"
            + (f", relative error of squared norms <= {basis['relative_error_bound']:.3f})" if basis["kind"] != "exact" else ")"))
    return "\n".join(lines) + "\n\n" + note + "\n"


def write_diagnosis(diagnosis: Diagnosis, out: Path) -> list[Path]:
    """diagnostics.json, summary.md, exploitation.png, estimator.png and labels.png in ``out``: written into a
    temporary folder inside ``out`` and moved into place only when every one is complete, so an interrupted
    diagnosis never leaves a half-written file. Strict JSON (a non-finite number is null)."""
    from fedsample.diagnostics.plots import plot_estimator, plot_exploitation, plot_labels
    from fedsample.experiments.runner import finite_or_none, written_together

    out.mkdir(parents=True, exist_ok=True)
    document = diagnosis.to_dict()
    names = ("diagnostics.json", "summary.md", "exploitation.png", "estimator.png", "labels.png")
    with written_together(out, names) as folder:
        (folder / names[0]).write_text(json.dumps(finite_or_none(document), indent=1, allow_nan=False))
        (folder / names[1]).write_text(summary_table(document))
        plot_exploitation(document, folder / names[2])
        plot_estimator(document, folder / names[3])
        plot_labels(diagnosis, folder / names[4])
    return [out / name for name in names]
