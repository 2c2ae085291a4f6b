"""``fedsample privacy``: the printed figures, and one-line errors with exit code 2."""

import pytest

from fedsample import privacy
from fedsample.cli import main

SIZES = "3,1,4,1,5,9,2,6,5,3,5,8,9,7,9,3,2,3,8,4,6,2,6,4,3,3,8,3,2,7,30,45"


def test_privacy_prints_alpha_error_budgets_and_audit(capsys):
    assert main(["privacy", "--epsilon", "3", "--M", "20", "--rounds", "10", "--sizes", SIZES, "--draws", "20000"]) == 0
    out = capsys.readouterr().out
    assert f"alpha = {privacy.alpha_for(3.0, 20):.6f}" in out
    assert "2 clients hold >= M = 20" in out and "clipped total 179" in out  # 141 (the first 30) + 19 + 19
    assert "permanent reports (default): 3 " in out
    assert "per-round reports: basic 30, at delta=1e-05 30" in out
    assert "max ratio" in out and "most-frequent-report attack" in out
    permanent_line = next(line for line in out.splitlines() if line.strip().startswith("permanent:"))
    first, last = permanent_line.split(":")[1].split(" after 1 round, ")
    assert first.strip() == last.split(" after")[0].strip()  # permanent: the attack gains nothing from rounds


@pytest.mark.parametrize("argv", [
    ["--epsilon", "0", "--M", "20", "--rounds", "10"],
    ["--epsilon", "3", "--M", "1", "--rounds", "10"],
    ["--epsilon", "3", "--M", "20", "--rounds", "0"],
    ["--epsilon", "3", "--M", "20", "--rounds", "5", "--sizes", "3,x"],
    ["--epsilon", "3", "--M", "20", "--rounds", "5", "--sizes", "3,0"],
])
def test_privacy_bad_input_is_one_line_and_exit_2(argv, capsys):
    args = argv if "--sizes" in argv else argv + ["--sizes", SIZES]
    assert main(["privacy", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsample: error:") and "\n" not in err


def test_privacy_prints_the_ledgers_epsilon_with_and_without_amplification(capsys):
    """The issue's figures: ten rounds at q = 64/1,500, sigma = 1, record level, PLD: 1.46 against 17.86."""
    pytest.importorskip("dp_accounting")
    assert main(["privacy", "--rounds", "10", "--sigma", "1", "--sample-rate", str(64 / 1500)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("per-example clipping"))
    assert row.split()[-2:] == ["1.46", "17.86"], row
    assert "amplified: each record kept independently with probability q = 0.04267" in out
    assert "alpha =" not in out  # no size-report part without --epsilon and --M


def test_privacy_user_level_prints_both_clipping_modes(capsys):
    pytest.importorskip("dp_accounting")
    assert main(["privacy", "--rounds", "3", "--sigma", "1", "--sample-rate", "0.05", "--unit", "user", "--k", "2", "--method", "rdp"]) == 0
    out = capsys.readouterr().out
    assert "unit: one user (at most k = 2 records), RDP" in out
    assert "1-(1-q)^k = 0.0975" in out and "Binomial(k=2, q=0.05)" in out


@pytest.mark.parametrize("argv", [
    ["--rounds", "10"],
    ["--rounds", "10", "--epsilon", "3"],
    ["--rounds", "10", "--sigma", "1", "--unit", "user"],
    ["--rounds", "10", "--sigma", "1", "--sample-rate", "0"],
    ["--rounds", "10", "--sigma", "0"],
    ["--rounds", "0", "--sigma", "1"],
])
def test_privacy_ledger_bad_input_is_one_line_and_exit_2(argv, capsys):
    assert main(["privacy", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsample: error:") and "\n" not in err
