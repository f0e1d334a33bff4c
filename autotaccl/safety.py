"""Checks on names, paths and storage URLs a user gives, made before anything is written.

A path or URL is checked as the argument ``flag`` (a command-line flag, or a library parameter such as
``TuneRequest.out``): the error is a :class:`~autotaccl.errors.ParameterError` naming it.

Names that become file or directory names (hardware profile names, which make experiment and study
names; ``--study``; search space names) must be one harmless path component. Names read back from a
tracking store are sanitised with :func:`file_stem` instead, since the store may hold anything.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from . import faults
from .errors import InputError, ParameterError

NAME_EXPECTED = "a name of 1-128 printable characters without '/', '\\' or a leading '.' (it becomes a file name)"
_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\]")
_STEM = re.compile(r"[^A-Za-z0-9._+-]+")
TOO_DEEP = "a document nested less than about 900 levels deep"
TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")


def safe_name(value: object, source: str, field: str) -> str:
    """``value`` if it can be a single file name component; InputError(source, field) otherwise."""
    if not isinstance(value, str) or not value.strip() or len(value) > 128 or _UNSAFE.search(value) \
            or value.startswith("."):
        raise InputError(source, field, NAME_EXPECTED)
    return value


def file_stem(text: str) -> str:
    """``text`` reduced to a harmless file name stem: ``../../etc/x`` -> ``etc_x``."""
    stem = _STEM.sub("_", str(text)).strip("._")
    return stem[:128] or "unnamed"


def relative_inside(path: str, base: Path) -> str:
    """``path`` relative to ``base`` if it lies in it, else as it is (URLs too): how a run directory's
    stores name each other, so that a copied or moved directory reads its own."""
    if "://" in path:
        return path
    try:
        return str(Path(path).resolve().relative_to(Path(base).resolve())) or "."
    except ValueError:
        return path


def anchored(path: str, base: Path) -> str:
    """``path`` as :func:`relative_inside` wrote it, made absolute against ``base`` (URLs and absolute
    paths as they are)."""
    return path if "://" in path else str(Path(base).resolve() / path)


def path_arg(value: str, flag: str) -> str:
    """A path argument: non-empty and without NUL bytes (the OS would refuse it mid-run)."""
    if not value or "\x00" in value:
        raise ParameterError(flag, repr(value), "a non-empty path without NUL bytes")
    return value


def _unwritable(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (None if one can): tried for real, since permissions,
    read-only mounts and quotas all say no only when asked (and root passes every permission check)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as err:
        return err.strerror or str(err)


def output_file(value: str, flag: str = "-o") -> Path:
    """A file to write: its directory exists and takes new files, and it is not itself a directory
    (checked before any work, so a long job never loses its result at the end)."""
    path = Path(path_arg(value, flag))
    if not path.parent.is_dir() or path.is_dir():
        raise ParameterError(flag, repr(value), "a file path in an existing directory")
    why = _unwritable(path.parent)
    if why:
        raise ParameterError(flag, repr(value), f"a file path in a writable directory ({path.parent}: {why})")
    return path


def output_dir(value: str, flag: str = "-o", replaces: tuple[str, ...] | None = None) -> Path:
    """A directory to create (or, with ``replaces``, to replace): no file stands in its way, and the
    directory it is created in (or replaced from) takes new files.

    A directory that is replaced as a whole may hold only files matching the ``replaces`` patterns
    (a previous output): ``-o .`` or ``-o ~`` must never delete a user's files.
    """
    path = Path(path_arg(value, flag)).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ParameterError(flag, repr(value), f"a directory path ({existing} is a file)")
    for folder in {existing, path.parent} if replaces is not None and path.is_dir() else {existing}:
        why = _unwritable(folder)
        if why:
            raise ParameterError(flag, repr(value), f"a directory path where files can be written ({folder}: {why})")
    if replaces is not None and path.is_dir():
        foreign = sorted(p.name for p in path.iterdir() if not any(p.match(g) for g in replaces))
        if foreign:
            raise ParameterError(flag, repr(value), f"a new directory or a previous output to replace (it holds "
                                                f"{', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''})")
    return path


def storage_url(value: str, flag: str = "--storage") -> str:
    """An Optuna storage: an SQLAlchemy URL whose driver is installed, or a journal file path."""
    path_arg(value, flag)
    if "://" not in value:
        if Path(value).is_dir():
            raise ParameterError(flag, repr(value), "a journal file path, not a directory")
        return value
    from sqlalchemy.engine import make_url

    expected = "a database URL Optuna can open (sqlite:///FILE, postgresql://..., mysql://...) or a journal file"
    try:
        url = make_url(value)
        url.get_dialect().import_dbapi()
    except Exception as err:   # ArgumentError, NoSuchModuleError, a missing driver (ImportError)
        raise ParameterError(flag, repr(value), f"{expected} ({type(err).__name__}: {err})".replace("\n", " ")) from None
    if url.get_backend_name() == "sqlite":
        _sqlite_file(value, flag)
    return value


def tracking_uri(value: str, flag: str = "--tracking-uri") -> str:
    """An MLflow tracking URI with a scheme MLflow supports (a new SQLite file's directory must exist)."""
    path_arg(value, flag)
    if "://" not in value or value.startswith("file:"):
        raise ParameterError(flag, repr(value), "a database or server URI such as sqlite:///runs/mlflow.db or "
                                                "http://host:5000 (MLflow 3 has no file store)")
    scheme = value.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme not in TRACKING_SCHEMES:
        raise ParameterError(flag, repr(value), f"a tracking URI with one of the schemes {', '.join(TRACKING_SCHEMES)}")
    if scheme == "sqlite":
        _sqlite_file(value, flag)
    return value


def _sqlite_file(value: str, flag: str) -> None:
    """The database file of an SQLite URL, whose directory must exist; ``sqlite://name.db`` (two slashes:
    SQLAlchemy reads ``name.db`` as a host and fails deep inside) is refused."""
    from sqlalchemy.engine import make_url

    url = make_url(value)
    if url.host:
        raise ParameterError(flag, repr(value), "sqlite:///relative/file.db or sqlite:////absolute/file.db "
                                                "(three slashes before a relative path)")
    if url.database not in (None, "", ":memory:"):
        _parent_exists(url.database, value, flag)


def _parent_exists(database: str, value: str, flag: str) -> None:
    if not Path(database).parent.is_dir():
        raise ParameterError(flag, repr(value), f"a database file in an existing directory ({Path(database).parent} is not one)")


_RENAME_EXCHANGE = 2         # renameat2(2) flag: swap two paths in one step (Linux >= 3.15)


def _exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` in one atomic step (False where the system cannot)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD = -100
    return renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _tmp_prefix(out: Path) -> str:
    return f".{out.name}.tmp-"


@contextmanager
def replaced_dir(out_dir: str | Path) -> Iterator[Path]:
    """Yield an empty sibling directory to fill; on success it takes ``out_dir``'s place in one step.

    A reader sees the old directory or the new one, never none (the two are swapped atomically, where the
    system can; elsewhere the old one is moved aside first). On any error the half-written directory is
    removed and ``out_dir`` is left as it was; what a killed writer left (``.NAME.tmp-*`` beside it) is
    removed by the next one. The new directory gets the usual mode (0777 less the umask), not mkdtemp's 0700.
    """
    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(_tmp_prefix(out) + "*"):
        if stale.is_dir() and not _held(stale):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(out) + f"{os.getpid()}-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    try:
        yield tmp
        faults.point("export.written")
        if not out.exists():
            tmp.rename(out)
        elif _exchange(tmp, out):
            shutil.rmtree(tmp)                      # now the old directory
        else:
            old = out.with_name(f"{_tmp_prefix(out)}{os.getpid()}-old")
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _held(folder: Path) -> bool:
    """Whether the process that made ``folder`` (its pid is in the name) is still running."""
    pid = folder.name.rpartition(".tmp-")[2].split("-")[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
