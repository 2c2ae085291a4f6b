"""One module per paper, each defining ``PAPER`` (a :class:`fedsample.reproduction.spec.Paper`)."""
