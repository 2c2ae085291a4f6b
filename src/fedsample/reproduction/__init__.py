"""Reproducing the papers' tables: claims as data (:mod:`.spec`), one module per paper (:mod:`.papers`)."""

from fedsample import lazy

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
