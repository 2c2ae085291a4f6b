"""Reproducing the papers' tables: claims as data (:mod:`.spec`), one module per paper (:mod:`.papers`)."""
