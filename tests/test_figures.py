"""A label the font cannot draw (an emoji) is one warning line per picture naming the character, not
matplotlib's warning per character and drawing pass (issue 40, item 5). This machine's fonts draw emoji, so the
figure here warns as matplotlib does with DejaVu Sans alone ("Glyph N (c) missing from font(s) DejaVu Sans.")."""

import warnings

import pytest

from fedsample.figures import save_figure


class Warns:
    """A figure whose layout and save warn as matplotlib does for a missing glyph (twice per pass)."""

    def tight_layout(self, rect=None):
        for _ in range(2):
            warnings.warn("Glyph 128512 (\\N{GRINNING FACE}) missing from font(s) DejaVu Sans.", UserWarning)

    def savefig(self, path, **options):
        self.tight_layout()
        warnings.warn("something else", UserWarning)


def test_missing_glyphs_are_one_line_and_other_warnings_pass():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_figure(Warns(), "out/curves.png")
    lines = [str(w.message) for w in caught]
    assert lines == ["something else", "curves.png: the font has no glyph for \\N{GRINNING FACE} (drawn as boxes)"]


def test_a_real_figure_saves(tmp_path):
    pytest.importorskip("matplotlib")
    from fedsample.experiments.report import plot_curves

    history = [[{"round": 1, "accuracy": 0.5}, {"round": 2, "accuracy": 0.6}]]
    plot_curves({"config": {"name": "g"}, "strategies": {"FedAvg \U0001F600": {"history": history}}}, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
