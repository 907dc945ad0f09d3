"""One writer per run folder. ``claim_run_folder`` takes an exclusive, non-blocking file lock on
``<folder>/.lock`` for as long as a run writes there, so a second process aiming at the same folder stops
at once, told the holder's pid and command, instead of interleaving its logs and checkpoints with the
first one's. It also settles what the folder may already hold: a fresh run refuses a non-empty folder
unless told to resume what is there or to empty it first.

    from agents.run_folder import claim_run_folder
    with claim_run_folder("runs/x", resume=False, overwrite=False, what="bipace-train run"):
        ...                                     # the only writer of runs/x until the block ends

The lock is ``fcntl.flock`` on an open file: the kernel drops it when its process ends, however it ends
(SIGKILL included), so a stale ``.lock`` never blocks a later run, and there is no check-then-create race.
Claims of one folder within one process share its lock (a benchmark and the trainer it drives may both
claim a folder); each claim is released on its own.
"""
from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

LOCK_NAME = ".lock"


class RunFolderError(ValueError):
    """A run folder this process cannot use: another process holds it, it cannot be written, or it holds
    something a fresh run would mix with. The message says what to do."""


class _Held:
    """This process's flock on one folder, shared by its claims of that folder."""

    def __init__(self, fd: int, created: bool):
        self.fd, self.created, self.claims = fd, created, 0


_HELD: dict[str, _Held] = {}


class RunFolderLock:
    """A claim of a run folder; ``release()`` (or leaving its ``with`` block, or the process ending) ends
    it. A folder the claim created that is still empty goes with it, so a refused run leaves nothing."""

    def __init__(self, path: Path, key: str, held: _Held):
        self.path, self._key, self._held, self.released = path, key, held, False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        held = self._held
        held.claims -= 1
        if held.claims > 0:
            return
        if _HELD.get(self._key) is held:
            del _HELD[self._key]
        try:
            if held.created and [p.name for p in self.path.iterdir()] == [LOCK_NAME]:
                (self.path / LOCK_NAME).unlink()     # while still locked: a racing claim re-checks the inode
                self.path.rmdir()
        except OSError:
            pass
        os.close(held.fd)                            # closing the file drops the lock

    def __enter__(self) -> "RunFolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:      # interpreter shutdown: the kernel drops the lock anyway
            pass


def claim_run_folder(path, *, resume: bool, overwrite: bool, what: str = "run") -> RunFolderLock:
    """Create ``path`` if needed and lock it for this process. Raises ``RunFolderError`` before anything is
    written when the folder cannot be written, when another process holds it (naming that process), or,
    without ``resume``, when it holds anything besides the lock file, unless ``overwrite``, which deletes
    what it holds. With ``resume`` the folder may hold anything, or nothing (the caller decides whether an
    empty folder can be resumed)."""
    if resume and overwrite:
        raise RunFolderError(f"{what} in {path}: resume and overwrite exclude each other; pick one")
    folder = Path(path)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):    # a folder whose lock file is writable may still not be
            pass
    except OSError as exc:
        raise RunFolderError(f"cannot write in the {what} folder {folder}: {exc.strerror or exc}; pick a "
                             "folder you can write, or fix its permissions") from None
    key = os.path.realpath(folder)
    held = _HELD.get(key)
    if held is None or not _locks_path(held.fd, folder / LOCK_NAME):   # unheld, or deleted and made again
        held = _HELD[key] = _acquire(folder, what, created)
    held.claims += 1
    lock = RunFolderLock(folder, key, held)
    try:
        if not resume:
            _fresh(folder, overwrite, what)
    except BaseException:
        lock.release()
        raise
    return lock


def claim_or_exit(parser, path, *, resume: bool, overwrite: bool, what: str = "run") -> RunFolderLock:
    """``claim_run_folder`` for a command line: a refusal ends the program through ``parser.error`` (its
    message, exit status 2) instead of a traceback."""
    try:
        return claim_run_folder(path, resume=resume, overwrite=overwrite, what=what)
    except RunFolderError as exc:
        parser.error(str(exc))


def _acquire(folder: Path, what: str, created: bool) -> _Held:
    lock_path = folder / LOCK_NAME
    for _ in range(10):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunFolderError(f"{folder} is in use by another {what}: {_holder(lock_path)}. Wait for it "
                                 "to finish or stop it, or pick another folder") from None
        if _locks_path(fd, lock_path):
            break
        os.close(fd)        # the holder removed the file between our open and our lock: lock the new one
    else:
        raise RunFolderError(f"could not lock {lock_path}: it kept being replaced; is something deleting it?")
    record = {"pid": os.getpid(), "command": shlex.join([sys.executable, *sys.argv]),
              "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return _Held(fd, created)


def _locks_path(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path``."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except OSError:
        return False


def _holder(lock_path: Path) -> str:
    """The holder's pid and command, as it wrote them (it writes right after locking: wait a moment)."""
    for _ in range(50):
        try:
            record = json.loads(lock_path.read_text())
            break
        except (OSError, ValueError):
            time.sleep(0.01)
    else:
        return "a process that did not say which (no pid in its .lock)"
    pid = int(record.get("pid", 0))
    try:
        os.kill(pid, 0)
        alive = ""
    except ProcessLookupError:
        alive = " (no longer running: a process it started still holds the lock; stop that one)"
    except PermissionError:
        alive = ""
    return f"pid {pid}{alive}, started {record.get('since', '?')}, command: {record.get('command', '?')}"


def _fresh(folder: Path, overwrite: bool, what: str) -> None:
    """A fresh run's folder: empty, or emptied when ``overwrite``."""
    held = sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME)
    if not held:
        return
    if not overwrite:
        shown = ", ".join(held[:6]) + (f" and {len(held) - 6} more" if len(held) > 6 else "")
        raise RunFolderError(f"{folder} is not empty (it holds {shown}): resume the {what} it holds "
                             "(--resume), delete what it holds and start over (--overwrite), or pick another "
                             "folder")
    for name in held:
        p = folder / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
