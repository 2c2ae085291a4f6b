"""Writing a diagnosis: diagnostics.json, summary.md (the table) and the pictures."""

from __future__ import annotations

import json
from pathlib import Path

from fedsample import outputs
from fedsample.diagnostics.measure import Diagnosis
from fedsample.experiments.report import markdown_text
from fedsample.diagnostics.document import DiagnosisDocument, DiagnosisNotes, SamplerSummary, StrategyResult
from fedsample.runtime.records import JSONObject

__all__ = ["check_diagnosis_folder", "summary_table", "write_diagnosis"]

COLUMNS = ("π", "bias ± SE of bias²", "variance", "MSE", "scale", "inclusion CV", "smallest/largest decile",
           "samples", "clients contacted", "trainings", "kB up", "server learns")


def _row(label: str, result: StrategyResult) -> list[str]:
    e, x, c, sampler = result["estimator"], result["exploitation"], result["cost"], result["sampler"]
    deciles = x["by_size_decile"]
    ratio = deciles[0]["inclusion"] / deciles[-1]["inclusion"] if deciles[-1]["inclusion"] > 0 else float("inf")
    return [
        label, sampler["inclusion"], f"{e['bias']:.3f} ({e['bias_sq']:.4f} ± {e['bias_sq_se']:.4f})", f"{e['variance']:.3f}",
        f"{e['mse']:.3f}", f"{e['scale']:.3f}", f"{x['cv']:.2f}", f"{ratio:.2f}", f"{c['samples']:.1f}",
        f"{c['clients_contacted']:.0f}", f"{c['local_trainings']:.0f}", f"{c['bytes_up'] / 1e3:.1f}",
        ", ".join(sampler["server_learns"]) or "—",
    ]


def summary_table(document: DiagnosisDocument) -> str:
    """The markdown table: per strategy how its inclusion probabilities are known (π: exact, estimated,
    degenerate), the estimator's bias, variance, MSE and scale relative to g*, the inclusion frequency's CV and
    smallest/largest size-decile ratio, the per-round cost (samples, clients contacted, local trainings, kB up) and
    what the client sampler makes the server learn."""
    lines = ["| strategy | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += ["| " + " | ".join(_row(label, r)) + " |" for label, r in document["strategies"].items()]
    basis = document["basis"]
    note = (f"{document['rounds']} draws at a fixed model; {document['clients']} clients, {document['samples']} samples; "
            f"gradients {basis['kind']} ({basis['dim']} of {basis['parameters']} coordinates"
            + (f", relative error of squared norms <= {basis['relative_error_bound']:.3f})" if basis["kind"] != "exact" else ")"))
    return "\n".join(lines) + "\n\n" + "\n".join([note, precision_line(document), *setting_lines(document)]) + "\n"


def precision_line(document: DiagnosisDocument) -> str:
    """How precise the table's numbers are for its R draws: bias² carries its standard error in the table, and the
    MSE's largest relative standard error over the strategies (the variance's is of the same order)."""
    relative = [e["mse_se"] / e["mse"] for e in (r["estimator"] for r in document["strategies"].values()) if e["mse"] > 0]
    worst = f"; MSE within {max(relative):.1%} (one standard error, the largest over the strategies)" if relative else ""
    return (f"precision: {document['rounds']} draws per strategy; bias² ± its jackknife standard error (a bias² within two "
            f"of them is no bias {document['rounds']} draws can see){worst}")


def setting_lines(document: DiagnosisDocument) -> list[str]:
    """What else the diagnosis used or found (the command line's ``notes``): the failure model, the grid value
    each strategy with a grid was diagnosed at, and the strategies that diverged in the first rounds of a run."""
    lines = []
    faults = document.get("faults")
    if faults:
        lines.append(f"failure model (the experiment's [faults]): {json.dumps(faults)}")
    for label, grid in (document.get("grid") or {}).items():
        lines.append(f"{markdown_text(label)}: diagnosed at {grid['param']} = {grid['value']}, the first of its grid values "
                     f"{grid['values']} (the diagnosis is per unit learning rate)")
    for label, result in document["strategies"].items():
        lines.extend(sampler_lines(label, result["sampler"]))
    check = document.get("run_check")
    if check:
        diverged = {label: status for label, status in check["status"].items() if status != "ok"}
        if not diverged:
            lines.append(f"run check: every strategy ran its first {check['rounds']} rounds as `fedsample run` does without diverging")
        for label, status in diverged.items():
            lines.append(f"**{markdown_text(label)} diverges in `fedsample run`** (first {check['rounds']} rounds): {markdown_text(status)}")
    return lines


def sampler_lines(label: str, sampler: SamplerSummary) -> list[str]:
    """What the table cannot say of a sampler whose inclusion probabilities are not exact: the kind and its statement
    (biased by design; no unbiased estimator), what the server learns and the sampler's probes per round."""
    if sampler["inclusion"] == "exact":
        return []
    learns = ", ".join(sampler["server_learns"]) or "nothing beyond the replies"
    probes = f"{sampler['probes']:g} probes per round ({sampler['probe_bytes'] / 1e3:.1f} kB up)" if sampler["probes"] else "no probes"
    kinds = ", ".join(f"{n} {k}" for k, n in sampler["rounds_by_kind"].items())
    return [f"{markdown_text(label)}: inclusion probabilities {sampler['inclusion']} ({kinds} rounds): {sampler['bias']}; "
            f"the server learns {learns}; {probes}"]


DIAGNOSIS_FILES = ("diagnostics.json", "summary.md", "exploitation.png", "estimator.png", "labels.png")


def diagnosis_marker(inputs: JSONObject) -> outputs.Marker:
    """The folder's fingerprint, ``diagnose.json``: what was diagnosed (``inputs``)."""
    return outputs.Marker("diagnose", DIAGNOSIS_FILES, inputs, subject="diagnosis")


def default_inputs(diagnosis: Diagnosis) -> JSONObject:
    """What determines a diagnosis when the caller does not say: dataset, clients, strategies, draws and seed."""
    return {"dataset": diagnosis.data.dataset.name, "clients": diagnosis.data.num_clients,
            "strategies": list(diagnosis.results), "draws": diagnosis.rounds, "seed": diagnosis.seed}


def check_diagnosis_folder(out: Path, inputs: JSONObject, overwrite: bool = False, make_parent: bool = False) -> None:
    """Refuse, before anything is computed, a folder that cannot receive a diagnosis (:mod:`fedsample.outputs`)."""
    outputs.check_folder(Path(out), diagnosis_marker(inputs), overwrite=overwrite, make_parent=make_parent)


def write_diagnosis(diagnosis: Diagnosis, out: Path, overwrite: bool = False, inputs: JSONObject | None = None,
                    notes: DiagnosisNotes | None = None) -> list[Path]:
    """diagnostics.json (with ``notes``: what else the diagnosis used or found), summary.md, exploitation.png,
    estimator.png, labels.png and the ``diagnose.json`` marker (``inputs``, default :func:`default_inputs`) in
    ``out`` (created; its parent must exist): written into a temporary folder inside ``out`` and moved into place
    only when every one is complete, so an interrupted diagnosis never leaves a half-written file. A folder
    holding results (a run's, another diagnosis) is refused unless ``overwrite``. Strict JSON (a non-finite
    number is null)."""
    from fedsample.diagnostics.plots import plot_estimator, plot_exploitation, plot_labels
    from fedsample.experiments.runner import finite_or_none

    out = Path(out)
    marker = diagnosis_marker(inputs if inputs is not None else default_inputs(diagnosis))
    document: DiagnosisDocument = {**diagnosis.to_dict(), **(notes or {})}
    names = DIAGNOSIS_FILES
    with outputs.written_results(out, marker, overwrite=overwrite) as folder:
        (folder / names[0]).write_text(json.dumps(finite_or_none(document), indent=1, allow_nan=False))
        (folder / names[1]).write_text(summary_table(document))
        plot_exploitation(document, folder / names[2])
        plot_estimator(document, folder / names[3])
        plot_labels(diagnosis, folder / names[4])
    return [out / name for name in names]
