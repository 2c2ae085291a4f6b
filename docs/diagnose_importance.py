"""The importance-sampling designs (FedSTS, ISFedAvg) diagnosed on the quickstart partition: the table of
docs/diagnostics.md "strategy (digits, 360 clients, ...)".

    python docs/diagnose_importance.py --draws 400 --out DIR    # DIR/diagnostics.json and DIR/summary.md

Six strategies at a fixed model (the MLP's initial parameters for seed 0) through :func:`fedsample.diagnose`, on
digits partitioned by LogNormalSizes(mean 4, sigma 2) with seed 0 (the quickstart-lognormal partition): FedAvg with
16 uniform clients (size-weighted mean), uniform sampling of 16 clients with the Horvitz-Thompson mean over clients,
FedSTS (m = 16, H = 4) with its unbiased and its paper aggregation, ISFedAvg (L = 16) with uniform and with
importance ("approx") agent probabilities. Every method takes one local step on all of a chosen client's data.
``docs/regenerate.py`` runs this script as it runs the CLI's commands and keeps its output as a record.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ALL_DATA = 1_000_000  # a batch larger than any client: one step on all of its data


def strategies() -> dict:
    """The six strategies of the table, under the labels it shows."""
    import fedsample as fs
    from fedsample.sampling.clients import UniformClients
    from fedsample.strategy import Strategy
    from fedsample.training.aggregate import WeightedMean
    from fedsample.training.local import LocalSGD

    return {
        "FedAvg (m=16 uniform, size-weighted)": fs.recipes.fedavg(clients_per_round=16, steps=1, batch_size=ALL_DATA),
        "Uniform m=16, Horvitz-Thompson": Strategy(clients=UniformClients(16), local=LocalSGD(lr=0.1, epochs=None, steps=1, batch_size=None),
                                                   aggregate=WeightedMean("inverse_inclusion")),
        "FedSTS (m=16, H=4)": fs.recipes.fedsts(H=4, m=16, steps=1, batch_size=ALL_DATA),
        "FedSTS (m=16, H=4, paper aggregation)": fs.recipes.fedsts(H=4, m=16, steps=1, batch_size=ALL_DATA, aggregation="paper"),
        "ISFedAvg (L=16, uniform)": fs.recipes.isfedavg(L=16, batch_size=ALL_DATA, update="uniform"),
        "ISFedAvg (L=16, approx)": fs.recipes.isfedavg(L=16, batch_size=ALL_DATA, update="approx"),
    }


def _report(label: str, result: dict) -> None:
    print(f"{label}: {result['seconds']:.0f} s", file=sys.stderr, flush=True)


def diagnose_importance(draws: int, out: Path) -> None:
    """Diagnose :func:`strategies` with ``draws`` draws; write ``out``/diagnostics.json and ``out``/summary.md."""
    import fedsample as fs
    from fedsample.diagnostics.report import summary_table
    from fedsample.experiments.runner import finite_or_none

    fed = fs.data.partition(fs.data.load_dataset("digits"), fs.data.LogNormalSizes(mean=4, sigma=2), seed=0)
    diagnosis = fs.diagnose(strategies(), fed, fs.models.MLP(hidden=64), rounds=draws, seed=0, progress=_report)
    document = finite_or_none(diagnosis.to_dict())
    out.mkdir(parents=True, exist_ok=True)
    (out / "diagnostics.json").write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    (out / "summary.md").write_text(summary_table(document))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=400, help="R, the draws per strategy (default 400)")
    parser.add_argument("--out", type=Path, required=True, help="the folder for diagnostics.json and summary.md")
    args = parser.parse_args(argv)
    from fedsample.privacy.amplification import PrivacyWarning

    warnings.simplefilter("ignore", PrivacyWarning)  # the probes' unprotected release, said once per client per draw
    diagnose_importance(args.draws, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
