"""One writer per run folder: the lock, what a fresh run refuses, and failing before any work."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agents.cli import main

HOLD = ("import sys, time\n"
        "from agents.run_folder import claim_run_folder\n"
        "lock = claim_run_folder(sys.argv[1], resume=True, overwrite=False, what='test holder')\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n")


@pytest.fixture
def held_by_another_process(tmp_path):
    """``tmp_path / 'run'`` locked by a second process until the test ends; yields (folder, its pid)."""
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), "--marker"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield folder, holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_second_process_stops_at_once_naming_the_holder(held_by_another_process, capsys):
    from agents.run_folder import RunFolderError, claim_run_folder
    folder, pid = held_by_another_process
    (folder / "warm_start").mkdir()             # as when seeds 0 and 1 were started into one folder
    with pytest.raises(RunFolderError, match=rf"in use by another run: pid {pid}, .*--marker"):
        claim_run_folder(folder, resume=True, overwrite=False)
    assert main(["--preset", "smoke", "--set", "seed=1", "--out-dir", str(folder), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"pid {pid}" in err and "--marker" in err and "in use by another training run" in err
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "warm_start"]     # nothing written


def test_the_lock_goes_with_its_process_and_is_shared_within_one(tmp_path):
    from agents.run_folder import claim_run_folder
    folder = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", HOLD.replace("time.sleep(120)", "pass"), str(folder)])
    assert done.returncode == 0
    first = claim_run_folder(folder, resume=True, overwrite=False)      # the holder ended: free again
    second = claim_run_folder(folder, resume=True, overwrite=False)     # this process holds it already
    first.release()
    probe = subprocess.run([sys.executable, "-c", HOLD, str(folder)], capture_output=True, text=True)
    assert probe.returncode != 0 and f"pid {os.getpid()}" in probe.stderr    # still held by `second`
    second.release()


def test_a_fresh_run_refuses_a_non_empty_folder_unless_overwrite(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "eval_by_task.jsonl").write_text('{"iteration": 3, "by_task": {}}\n')   # an earlier run's
    assert main(["--preset", "smoke", "--set", "iterations=1", "--out-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "is not empty (it holds eval_by_task.jsonl)" in err and "--resume" in err and "--overwrite" in err
    assert (folder / "eval_by_task.jsonl").read_text().startswith('{"iteration": 3')      # untouched
    assert main(["--preset", "smoke", "--set", "iterations=1", "--out-dir", str(folder), "--overwrite"]) == 0
    lines = (folder / "eval_by_task.jsonl").read_text().splitlines()
    assert [line[:15] for line in lines] == ['{"iteration": 0', '{"iteration": 1']     # no stale line


def test_a_refused_claim_of_a_new_folder_leaves_nothing(tmp_path):
    from agents.run_folder import RunFolderError, claim_run_folder
    with pytest.raises(RunFolderError, match="exclude each other"):
        claim_run_folder(tmp_path / "a", resume=True, overwrite=True)
    with claim_run_folder(tmp_path / "b" / "run", resume=False, overwrite=False):
        assert (tmp_path / "b" / "run" / ".lock").exists()
    assert not (tmp_path / "b" / "run").exists()        # created by the claim and left empty: gone again


def _as_nobody(fn) -> tuple[int, str]:
    """``fn()``'s exit code and stderr, run in a forked child that dropped root (root writes anywhere)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                  # the child: never returns into pytest
        code = 99
        try:
            os.close(read)
            sys.stderr = os.fdopen(write, "w")
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            code = fn()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        err = f.read()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), err


def test_an_unwritable_folder_fails_before_any_work(monkeypatch):
    import agents.sft

    def no_work(*args, **kwargs):
        raise AssertionError("the warm start ran")
    monkeypatch.setattr(agents.sft, "run_sft", no_work)
    folder = Path(tempfile.mkdtemp(prefix="bipace_ro_"))
    try:
        folder.chmod(0o555)               # an existing folder this user can read but not write
        code, err = _as_nobody(lambda: main(["--preset", "smoke", "--out-dir", str(folder)]))
    finally:
        folder.chmod(0o755)
        folder.rmdir()
    assert code == 2, err
    assert f"cannot write in the training run folder {folder}" in err and "warm start ran" not in err
