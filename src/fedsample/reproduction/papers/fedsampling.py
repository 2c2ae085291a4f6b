"""FedSampling (Qi et al., IJCAI 2023): Table 1 (text classification under log-normal size imbalance),
Fig. 3 (weighted client sampling, the naive method), Fig. 4 (sigma sweep) and Fig. 5 (label-sorted
non-IID clients), as figures and orderings over the ``fedsampling-*`` presets.

The paper's MIND/Toys/Beauty are not available offline: 20 Newsgroups (tokenized) stands in for MIND on
the GPU profile, so the paper's Table 1 figures are set beside ours as the paper's setting, not as a
number we expect to hit. The CPU profile runs Fashion-MNIST with an MLP (the paper only plots its
Fig. 4-5 values, so those rows carry no paper figure).
"""

from __future__ import annotations

from fedsample.reproduction.spec import Comparison, Figure, Paper, with_seeds_needed

__all__ = ["PAPER", "TEXTCNN", "TRANSFORMER"]

SIGMA_PRESETS = tuple(f"fedsampling-fmnist-sigma{s}" for s in (1, 2, 3, 4))
CPU_LOGNORMAL = "fedsampling-fmnist-sigma4"
CPU_SHARDS = "fedsampling-fmnist-shards"
CPU_LRGRID = "fedsampling-fmnist-sigma4-lrgrid"
CPU_EPS_M = "fedsampling-fmnist-eps-m"
#: The preset of the paper's 20 Newsgroups TextCNN runs (GPU profile).
TEXTCNN = "fedsampling-20ng-textcnn-cuda"
#: The preset of the paper's 20 Newsgroups Transformer runs (GPU profile).
TRANSFORMER = "fedsampling-20ng-transformer-cuda"
RESNET_SHARDS = "fedsampling-fmnist-resnet-shards-cuda"
FEDAVG_FAMILY = ("FedAvg", "FedYogi", "FedAdagrad", "FedAdam")
# Every comparison is within one preset, whose runs of one seed share the partition, the validation split and
# the initial weights: they pair by seed (the paired t-test on per-seed differences).
PAIRED = True
# The tie claims' equivalence margin, in accuracy points.
CENTRALIZED_MARGIN = 1.0
CENTRALIZED_REASON = ("below the smallest gap (1.36 points, Transformer FedAdam) by which Table 1's FedAvg family "
                      "trails centralized training: a tie at this margin separates FedSampling from the baselines")
CONTROL_REASON = ("the margin of the centralized tie: a size estimate costing less than 1 point is as good as exact "
                  "sizes for Table 1's claims, whose gaps are 1.36 points or more")

# Table 1, MIND columns (mean of 5 runs; Macro-F1, Accuracy in %).
TABLE1_MIND = {
    TEXTCNN: {
        "Centralized": (51.52, 71.14), "FedAvg": (48.11, 69.23), "FedYogi": (49.12, 68.92),
        "FedAdagrad": (48.55, 67.74), "FedAdam": (48.54, 68.22), "FedSampling": (51.33, 71.15),
    },
    TRANSFORMER: {
        "Centralized": (53.73, 72.19), "FedAvg": (50.46, 70.74), "FedYogi": (50.94, 70.29),
        "FedAdagrad": (50.99, 70.65), "FedAdam": (50.69, 70.83), "FedSampling": (53.43, 71.98),
    },
}
MODEL_NAME = {TEXTCNN: "Text-CNN", TRANSFORMER: "Transformer"}


def table1_figures() -> tuple[Figure, ...]:
    """Table 1's MIND numbers, one Figure per (model, method, metric), set beside 20 Newsgroups."""
    rows = []
    for source, methods in TABLE1_MIND.items():
        for label, (f1, acc) in methods.items():
            for metric, value in (("accuracy", acc), ("macro_f1", f1)):
                rows.append(Figure(
                    claim=f"Table 1, MIND, {MODEL_NAME[source]}: {label} {metric}", source=source, label=label,
                    paper=value, metric=metric,
                    note="paper: MIND (log-normal sizes, sigma 4); ours: 20 Newsgroups tokens, same partition",
                ))
    return tuple(rows)


def beats_fedavg_family(source: str, claim: str) -> tuple[Comparison, ...]:
    """FedSampling above each uniform-client FedAvg-family baseline in ``source``."""
    return tuple(Comparison(claim=f"{claim}: FedSampling > {worse}", source=source, better="FedSampling", worse=worse,
                            paired=PAIRED)
                 for worse in FEDAVG_FAMILY)


def matches_centralized(source: str, claim: str) -> Comparison:
    return Comparison(claim=f"{claim}: FedSampling ≈ Centralized", source=source, better="FedSampling",
                      worse="Centralized", tie=True, margin=CENTRALIZED_MARGIN, margin_reason=CENTRALIZED_REASON,
                      paired=PAIRED)


def weighted_sampling_orderings(source: str) -> tuple[Comparison, ...]:
    """Fig. 3: size-weighted client sampling beats uniform but not FedSampling; the naive method loses."""
    return (
        Comparison(claim="Fig. 3: size-weighted > uniform client sampling (FedAvg)", source=source,
                   better="FedAvg (size-weighted clients)", worse="FedAvg", paired=PAIRED),
        Comparison(claim="Fig. 3: FedSampling > size-weighted FedAvg", source=source, better="FedSampling",
                   worse="FedAvg (size-weighted clients)", paired=PAIRED),
        Comparison(claim="Fig. 3: FedSampling > naive fixed ratio", source=source, better="FedSampling",
                   worse="Naive fixed ratio", paired=PAIRED),
        Comparison(claim="control: FedSampling's private size estimate ≈ exact sizes (Lemma 3.1: N~ unbiased)",
                   source=source, better="FedSampling", worse="FedSampling (exact sizes)", tie=True,
                   margin=CENTRALIZED_MARGIN, margin_reason=CONTROL_REASON, paired=PAIRED,
                   note="not a row of the paper: the non-private control for the size estimate"),
    )


def selected_lr_orderings(source: str) -> tuple[Comparison, ...]:
    """Table 1 / Fig. 3 at sigma 4 with every method's lr selected on a validation split."""
    claim = "Table 1 stand-in, lr selected per method (sigma 4)"
    return (
        Comparison(claim=f"{claim}: FedSampling > FedAvg", source=source, better="FedSampling", worse="FedAvg",
                   paired=PAIRED),
        Comparison(claim=f"{claim}: FedSampling > size-weighted FedAvg", source=source, better="FedSampling",
                   worse="FedAvg (size-weighted clients)", paired=PAIRED),
        matches_centralized(source, claim),
        Comparison(claim=f"control, {claim}: FedSampling's private size estimate ≈ exact sizes", source=source,
                   better="FedSampling", worse="FedSampling (exact sizes)", tie=True, margin=CENTRALIZED_MARGIN,
                   margin_reason=CONTROL_REASON, paired=PAIRED,
                   note="not a row of the paper: the non-private control for the size estimate"),
    )


def privacy_utility(source: str) -> tuple[Comparison, ...]:
    """Fig. 6: at a fixed M a larger privacy budget is better; at a fixed eps a moderate M (10^2) is best."""
    claim = "Fig. 6 stand-in (sigma 4)"
    return (
        Comparison(claim=f"{claim}: eps 3 beats eps 1 (M 100)", source=source, better="eps=3, M=100", worse="eps=1, M=100",
                   paired=PAIRED),
        Comparison(claim=f"{claim}: eps 8 beats eps 3 (M 100)", source=source, better="eps=8, M=100", worse="eps=3, M=100",
                   paired=PAIRED),
        Comparison(claim=f"{claim}: M 100 beats M 10 (eps 3)", source=source, better="eps=3, M=100", worse="eps=3, M=10",
                   paired=PAIRED),
        Comparison(claim=f"{claim}: M 100 beats M 1000 (eps 3)", source=source, better="eps=3, M=100", worse="eps=3, M=1000",
                   paired=PAIRED),
    )


def sigma_sweep() -> tuple[Comparison, ...]:
    """Fig. 4: at every sigma FedSampling ≈ centralized and beats FedAvg; the baselines decline as sigma
    grows (read across the rows: the FedAvg gap should widen from sigma 1 to sigma 4)."""
    rows = []
    for sigma, source in zip((1, 2, 3, 4), SIGMA_PRESETS):
        rows.append(matches_centralized(source, f"Fig. 4, sigma {sigma}"))
        rows.append(Comparison(claim=f"Fig. 4, sigma {sigma}: FedSampling > FedAvg", source=source,
                               better="FedSampling", worse="FedAvg", paired=PAIRED))
    return tuple(rows)


# Seeds per arm a conclusive verdict needs at 80% power (alpha 0.05 two-sided) at the observed d and sd of the
# stored 2026-11-23 cpu run (docs/reproduction.md): Welch's test from its printed mean, sd and n, so a planning
# figure for the paired test a re-run uses.
SEEDS_NEEDED = {
    (CPU_LOGNORMAL, "FedAvg (size-weighted clients)", "FedAvg"): 5147,
    (CPU_LOGNORMAL, "FedSampling", "FedAvg (size-weighted clients)"): 10,
    (CPU_LOGNORMAL, "FedSampling", "Naive fixed ratio"): 25,
    (CPU_LOGNORMAL, "FedSampling", "FedSampling (exact sizes)"): 59,
    (CPU_LOGNORMAL, "FedSampling", "FedAvg"): 10,
    (CPU_LOGNORMAL, "FedSampling", "FedYogi"): 9,
    (CPU_LOGNORMAL, "FedSampling", "FedAdagrad"): 16,
    (CPU_LOGNORMAL, "FedSampling", "FedAdam"): 9,
    (CPU_LOGNORMAL, "FedSampling", "Centralized"): 757,
    (SIGMA_PRESETS[0], "FedSampling", "Centralized"): 3947,
    (SIGMA_PRESETS[0], "FedSampling", "FedAvg"): 159,
    (SIGMA_PRESETS[1], "FedSampling", "Centralized"): 1020,
    (SIGMA_PRESETS[1], "FedSampling", "FedAvg"): 34,
    (SIGMA_PRESETS[2], "FedSampling", "Centralized"): 344,
    (SIGMA_PRESETS[2], "FedSampling", "FedAvg"): 13,
    (CPU_LRGRID, "FedSampling", "FedAvg"): 5,
    (CPU_LRGRID, "FedSampling", "FedAvg (size-weighted clients)"): 5,
    (CPU_LRGRID, "FedSampling", "Centralized"): 20,
    (CPU_LRGRID, "FedSampling", "FedSampling (exact sizes)"): 21,
    (CPU_EPS_M, "eps=3, M=100", "eps=1, M=100"): 233,
    (CPU_EPS_M, "eps=8, M=100", "eps=3, M=100"): 35,
    (CPU_EPS_M, "eps=3, M=100", "eps=3, M=10"): 29,
    (CPU_EPS_M, "eps=3, M=100", "eps=3, M=1000"): 4,
    (CPU_SHARDS, "FedSampling", "FedAvg"): 4,
    (CPU_SHARDS, "FedSampling", "FedYogi"): 7,
    (CPU_SHARDS, "FedSampling", "FedAdagrad"): 6,
    (CPU_SHARDS, "FedSampling", "FedAdam"): 7,
    (CPU_SHARDS, "FedSampling", "Centralized"): 28,
}

#: The paper, its claims and figures, and the presets that reproduce them.
PAPER = Paper(
    name="fedsampling",
    citation="Qi, Wu, Lyu, Huang, Xie. FedSampling: A Better Sampling Strategy for Federated Learning. IJCAI 2023",
    presets={
        "cpu": (*SIGMA_PRESETS, CPU_LRGRID, CPU_EPS_M, CPU_SHARDS),
        "cuda": (TEXTCNN, TRANSFORMER, RESNET_SHARDS),
    },
    figures=table1_figures(),
    comparisons=with_seeds_needed((
        *beats_fedavg_family(TEXTCNN, "Table 1, Text-CNN"),
        matches_centralized(TEXTCNN, "Table 1, Text-CNN"),
        *beats_fedavg_family(TRANSFORMER, "Table 1, Transformer"),
        matches_centralized(TRANSFORMER, "Table 1, Transformer"),
        *weighted_sampling_orderings(TRANSFORMER),
        *weighted_sampling_orderings(CPU_LOGNORMAL),
        *beats_fedavg_family(CPU_LOGNORMAL, "Table 1 stand-in (Fashion-MNIST MLP, sigma 4)"),
        *sigma_sweep(),
        *selected_lr_orderings(CPU_LRGRID),
        *privacy_utility(CPU_EPS_M),
        *beats_fedavg_family(CPU_SHARDS, "Fig. 5 stand-in (label-sorted shards)"),
        matches_centralized(CPU_SHARDS, "Fig. 5 stand-in (label-sorted shards)"),
        *beats_fedavg_family(RESNET_SHARDS, "Fig. 5 (ResNet, label-sorted shards)"),
    ), SEEDS_NEEDED),
    notes=(
        "Budgets: every baseline touches K = 2048 samples per round in expectation (samples_per_round = 2048: "
        "m derived each round from the reported sizes) and trains one local epoch in batches of 32, as the "
        "paper's FedAvg/FedYogi/FedAdagrad/FedAdam train locally; FedSampling and centralized take one step of K.",
        "Data: MIND, Toys and Beauty are not available offline; 20 Newsgroups (tokens) stands in for MIND on the "
        "GPU, Fashion-MNIST for EMNIST. The paper's Fig. 3-6 values are only plotted: those rows carry no figure.",
        "Fig. 6 (epsilon x M grid): fedsampling-fmnist-eps-m, with fresh reports every round as the paper's protocol; Fig. 5's client size is 300 (§4.4; §4.1 says 6,000 for "
        "EMNIST).",
        "CPU stand-ins use lr 0.5 for FedSampling/centralized (the paper's eta = 0.05 barely moves an MLP in 30 "
        "rounds of one step); the cuda presets use the paper's 0.05.",
        "Measured 2026-11-23 (cpu profile, 30 rounds, seeds 0-2, final accuracy %, mean +- sd): sigma 4 - "
        "centralized 52.6 +- 9.3, FedSampling 48.9 +- 24.8 (per seed 20.2, 64.3, 62.1), FedSampling with exact "
        "sizes 59.4 +- 5.7, naive 63.7 +- 2.6, FedAvg 74.4 +- 6.0, size-weighted FedAvg 74.8 +- 8.3, FedYogi 75.7, "
        "FedAdam 75.9, FedAdagrad 67.5. Sigma 1 to 4 give the same picture (FedSampling 52.6 / 49.2 / 47.5 / 48.9, "
        "sd 20-26; FedAvg 57.2 / 62.0 / 69.7 / 74.4): Table 1's and Fig. 4's FedSampling > FedAvg family does not "
        "hold on this stand-in; the comparisons are 'inconclusive' only because FedSampling's sd is 25 points.",
        "Why FedSampling's sd is 25 points: with permanent reports N~ is drawn once per run. At M = 300 it came out "
        "30,000 (floored at the number of clients; the true total is 60,000) for seed 0, 148,276 for seed 1 and "
        "318,105 for seed 2, so the step eta*S/K was about 2x, 0.4x and 0.19x the intended one. Seed 0 (2x) ends "
        "at 20%, seeds 1-2 (smaller steps) at 62-64%. The same seed gives the same N~ at every sigma (the "
        "partition changes, the report noise dominates). The exact-size control removes that spread (sd 2.5-5.7). "
        "See docs/size-estimate.md: at this population the estimate is floored in 48% of draws.",
        "Why even the exact control trails the FedAvg family here: lr 0.5 is too large for one step of 2048 on "
        "this MLP (centralized itself ends at 47.2, 63.3, 47.2 over the seeds), while the baselines' one local "
        "epoch at lr 0.05 takes many steps per round for the larger clients. The stand-in's step sizes were set "
        "by hand, not selected; an lr grid on a validation split ([strategies.grid], [validation]) is the fair "
        "comparison: fedsampling-fmnist-sigma4-lrgrid runs it.",
        "Measured with the lr selected per method (fedsampling-fmnist-sigma4-lrgrid, 30 rounds, seeds 0-2): "
        "FedSampling 54.6 +- 11.5 (lr 0.15), exact sizes 63.2 +- 0.8, centralized 63.6 +- 3.3, FedAvg 76.7 +- 6.2 "
        "(lr 0.15, the top of its grid), size-weighted FedAvg 76.1 +- 6.8: FedSampling > FedAvg does not hold (22 "
        "points behind, but at 3 seeds 'inconclusive', not 'reversed': Welch p = 0.06 two-sided). Most "
        "likely reason: one step of K per round takes 30 optimizer steps in 30 rounds, the FedAvg family's local "
        "epoch many more on the larger clients at the same samples per round; the paper's runs go to convergence.",
        "Measured Fig. 6 stand-in (fresh reports every round, lr 0.15, seeds 0-2): exact sizes 63.9 +- 2.2; M 100 "
        "at eps 1 / 3 / 8: 64.9 +- 1.0, 65.5 +- 3.1, 63.7 +- 2.0 (no eps effect resolvable); eps 3 at M 10 / 100 / "
        "1000: 63.8 +- 0.5, 65.5 +- 3.1, 53.7 +- 4.6 (a large M hurts: holds; M 10 vs 100 inconclusive). With fresh "
        "reports the per-round step noise averages out over rounds (sd 1-3 points), where permanent reports (the "
        "library's default, one N~ per run) give a 25-point spread over seeds at M 300.",
        "Fig. 5 stand-in (label-sorted shards, 200 clients of 300): FedSampling 63.6 +- 7.7 beats FedAvg 40.7 +- "
        "10.0 (holds, Welch p = 0.02) and leads FedYogi 49.6, FedAdam 49.7 and FedAdagrad 52.1 by 11-14 points "
        "(inconclusive at 3 seeds, p = 0.05-0.06); it is 6 points above centralized (57.2 +- 6.3; the tie within "
        "1 point is inconclusive). "
        "A cohort of ~7 two-class clients sees few labels per round; sampling data from every client sees them all.",
    ),
)
