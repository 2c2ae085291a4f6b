"""Output folders: what every command that writes files checks before it starts, and how it writes.

Every command that writes (``run``, ``diagnose``, ``partition``, ``reproduce``, and the library functions
behind them) fingerprints its folder with a small marker file ``COMMAND.json``: the command, the files it
writes there and the inputs that determine them (``run.json`` holds the experiment). Before anything is
computed or written, :func:`check_folder` makes sure that

- the parent folder exists (and is a folder), and the folder itself is a folder if it exists;
- the folder can be written: a probe file is created and removed (a read-only folder or file system is one
  line naming the folder and the operating system's reason, not a traceback after hours of work);
- the folder holds no results: another command's marker, or this command's files, refuse unless
  ``overwrite`` (which replaces them) or, for a command that can ``resume``, the same inputs.

:func:`start` then creates the folder, removes staging left by a killed process, clears the old results with
``overwrite`` and records the marker. Results are written with :func:`written_together` (a staging folder
inside the output folder, moved into place only when every file is complete) or :func:`write_atomic` (one
file through a temporary file and a rename), so an interrupted or failing command never leaves a
half-written file. Staging names carry the writing process's id: one whose process is gone is stale.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from fedsample.runtime.records import JSONObject

__all__ = [
    "Marker", "OutputError", "check_folder", "error_line", "start", "write_atomic", "written_results",
    "written_together",
]

STAGING = ".fedsample-staging-"
LEGACY_STAGING = ".writing-"  # the staging prefix of earlier versions (no process id: always stale)
COMMANDS = ("run", "diagnose", "partition", "reproduce")  # each one's marker is COMMAND.json


class OutputError(ValueError):
    """An output folder the command may not use: one line naming the folder."""


@dataclass(frozen=True)
class Marker:
    """What a command writes into a folder: ``command`` (its marker is ``COMMAND.json``), the ``files`` (and
    folders) it owns there, the ``inputs`` that determine them (JSON), whether it can ``resume`` into a folder
    holding the same inputs (``free``: dotted input keys that may differ then, e.g. ``config.rounds``), and the
    ``subject`` a refusal names ("another experiment")."""

    command: str
    files: tuple[str, ...]
    inputs: JSONObject
    resumable: bool = False
    free: tuple[str, ...] = ()
    subject: str = "experiment"

    def __post_init__(self) -> None:
        if self.command not in COMMANDS:
            raise ValueError(f"marker: command must be one of {', '.join(COMMANDS)}, got {self.command!r}")

    @property
    def name(self) -> str:
        return f"{self.command}.json"

    def document(self, files: tuple[str, ...] | None = None) -> JSONObject:
        return {"command": self.command, "files": [*sorted(set(files or self.files))], **self.inputs}

    def text(self, files: tuple[str, ...] | None = None) -> str:
        """The marker file's content."""
        return json.dumps(self.document(files), indent=1) + "\n"


def check_folder(out: Path, marker: Marker, *, resume: bool = False, overwrite: bool = False, make_parent: bool = False) -> None:
    """Refuse (:class:`OutputError`, one line) an output folder ``out`` that this command cannot use; writes
    nothing (see the module docstring). ``make_parent``: the parent may be missing (a default folder such as
    ``runs/``, which the command creates once it goes ahead) when its own parent exists."""
    out = Path(out)
    writable = nearest_existing(out, make_parent)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output folder {out} exists and is not a directory")
    probe_writable(out, writable)
    if overwrite or not out.is_dir():
        return
    found = markers(out)
    others = sorted(c for c in found if c != marker.command)
    if others:
        raise OutputError(f"output folder {out} holds the results of 'fedsample {others[0]}' ({others[0]}.json): "
                          "pass --overwrite to replace them, or another --out")
    if marker.command not in found and not any((out / name).exists() for name in marker.files):
        return
    if not (resume and marker.resumable):
        hint = " or --resume to continue" if marker.resumable else ""
        raise OutputError(f"output folder {out} holds the results of 'fedsample {marker.command}': pass --overwrite to replace them{hint}")
    changed = differences(found.get(marker.command), marker)
    if changed:
        raise OutputError(f"--resume: output folder {out} holds another {marker.subject} ({', '.join(changed)} differ); "
                          "pass --overwrite or another --out")


def nearest_existing(out: Path, make_parent: bool = False) -> Path:
    """The folder whose writability decides whether ``out`` can be made: ``out``, its parent, or (with
    ``make_parent``) its grandparent; a missing or non-folder parent is one :class:`OutputError` line."""
    if out.exists():
        return out
    parent = out.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"output folder {out}: {parent} is a file, not a folder")
    if parent.is_dir():
        return parent
    if make_parent and parent.parent.is_dir():
        return parent.parent
    raise OutputError(f"output folder {out}: its parent folder {parent} does not exist")


def probe_writable(out: Path, folder: Path) -> None:
    """Create and remove a probe file in ``folder`` (and restore its modification time): a folder that cannot
    be written is one line with the operating system's reason (root passes permission checks; a read-only file
    system still refuses)."""
    before = os.stat(folder)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f"{STAGING}{os.getpid()}-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise OutputError(f"output folder {out}: cannot write in {folder}: {reason(error)}") from None
    try:  # the folder as it was: a check leaves no trace, not even a new modification time
        os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))
    except OSError:
        pass


def markers(out: Path) -> dict[str, JSONObject | None]:
    """Command -> its marker document (None: unreadable) for every marker in ``out``. A ``run.json`` of an
    earlier version (no ``command`` key) is a run's."""
    found: dict[str, JSONObject | None] = {}
    for command in COMMANDS:
        path = out / f"{command}.json"
        if not path.is_file():
            continue
        try:
            document = json.loads(path.read_text())
            found[command] = document if isinstance(document, dict) else None
        except (OSError, ValueError):
            found[command] = None
    return found


def differences(saved: JSONObject | None, marker: Marker) -> list[str]:
    """The input keys (one level into a dict-valued input) whose saved value differs from ``marker``'s, less
    the ``free`` ones."""
    if saved is None:
        return [f"{marker.name} (missing or unreadable: results of an earlier version?)"]
    changed = []
    for key, value in marker.inputs.items():
        old = saved.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            changed += [k for k in sorted(set(value) | set(old)) if f"{key}.{k}" not in marker.free and value.get(k) != old.get(k)]
        elif key not in marker.free and value != old:
            changed.append(key)
    return changed


def start(out: Path, marker: Marker, *, overwrite: bool = False, record: bool = True) -> None:
    """Create ``out`` (its parent exists: :func:`check_folder`), remove stale staging, clear the results there
    with ``overwrite``, and (``record``) write the marker; a resumed folder's marker keeps the files it named."""
    out = Path(out)
    out.mkdir(exist_ok=True)
    remove_stale(out)
    if overwrite:
        clear(out, marker)
    if record:
        files = (*marker.files, *named_files(markers(out).get(marker.command)))
        write_atomic(out / marker.name, lambda p: p.write_text(marker.text(files)))


def named_files(document: JSONObject | None) -> tuple[str, ...]:
    """The files a marker document names (none for an unreadable one or a run.json of an earlier version)."""
    files = (document or {}).get("files")
    return tuple(str(name) for name in files) if isinstance(files, list) else ()


def clear(out: Path, marker: Marker) -> list[str]:
    """Remove every command's results from ``out``: the files each marker names, the markers, and this
    command's own files; other files are left alone. Returns the names removed."""
    names = set(marker.files)
    for command, document in markers(out).items():
        names |= {*named_files(document), f"{command}.json"}
    removed = []
    for name in sorted(names):
        if Path(name).name != name or name in ("", ".", ".."):
            continue  # a marker names entries of its own folder only
        target = out / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        else:
            continue
        removed.append(name)
    return removed


def remove_stale(out: Path) -> list[str]:
    """Remove the staging files and folders in ``out`` left by a process that no longer runs (a killed
    command); returns their names. Staging of a live process (another command writing there) is kept."""
    removed = []
    for entry in Path(out).iterdir():
        if not is_stale(entry.name):
            continue
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and not entry.is_symlink() else entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed


def is_stale(name: str) -> bool:
    """Whether ``name`` is staging of a process that is gone (or of an earlier version)."""
    if name.startswith(LEGACY_STAGING):
        return True
    if not name.startswith(STAGING):
        return False
    pid = name[len(STAGING):].split("-", 1)[0]
    return not (pid.isdigit() and process_alive(int(pid)))


def process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists (another user's)
        return True
    return True


def staging_prefix() -> str:
    return f"{STAGING}{os.getpid()}-"


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file in the same folder and rename it into place; the file gets the
    user's normal permissions (0666 less the umask), like any other file the tool writes. An operating-system
    failure names ``path``, and no temporary file stays behind."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=staging_prefix(), suffix=f".{path.name}")
    except OSError as error:
        raise OSError(error.errno, reason(error), str(path)) from None
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except OSError as error:
        raise OSError(error.errno, reason(error), str(path)) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def written_together(out: Path, names: Sequence[str]) -> Iterator[Path]:
    """A staging folder inside ``out``: the block writes the files ``names`` there (a list the block may shorten:
    the names listed when it ends), and they are moved into ``out`` only when the block ends without error, so a failure leaves none of them half-written (a killed
    process leaves the staging folder, which :func:`start` removes next time). An operating-system failure
    while writing names the file in ``out``."""
    out = Path(out)
    try:
        tmp = Path(tempfile.mkdtemp(dir=out, prefix=staging_prefix()))
    except OSError as error:
        raise OSError(error.errno, reason(error), str(out)) from None
    try:
        try:
            yield tmp
        except OSError as error:
            raise OSError(error.errno, reason(error), str(out / staged_name(error.filename, tmp))) from None
        for name in names:
            try:
                os.replace(tmp / name, out / name)
            except OSError as error:
                raise OSError(error.errno, reason(error), str(out / name)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def written_results(out: Path, marker: Marker, *, overwrite: bool = False) -> Iterator[Path]:
    """The whole life of a folder whose files are written at the end (a diagnosis, a partition report): check
    it (:func:`check_folder`), start it (:func:`start`), and let the block write ``marker.files`` into a staging
    folder; with the marker added they are moved into ``out`` together (:func:`written_together`)."""
    out = Path(out)
    check_folder(out, marker, overwrite=overwrite)
    start(out, marker, overwrite=overwrite, record=False)
    with written_together(out, (*marker.files, marker.name)) as folder:
        yield folder
        (folder / marker.name).write_text(marker.text())


def staged_name(filename: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None, staging: Path) -> str:
    """The name inside the output folder of a file the block was writing in ``staging``."""
    if filename is None:
        return ""
    path = Path(os.fsdecode(filename))
    try:
        return str(path.relative_to(staging))
    except ValueError:
        return path.name


def reason(error: OSError) -> str:
    """The operating system's reason for ``error`` (its strerror), e.g. 'No space left on device'."""
    if error.strerror:
        return error.strerror
    if error.errno:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__


def error_line(error: OSError) -> str:
    """One line for an operating-system error: the path (both, for a rename) and the reason."""
    paths = [os.fsdecode(p) for p in (error.filename, error.filename2) if p is not None]
    where = " -> ".join(paths)
    return f"{where}: {reason(error)}" if where else reason(error)
