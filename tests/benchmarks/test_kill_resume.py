"""Crash consistency in CI: two runs SIGKILLed where a kill used to leave wrong files (half-way through a
checkpoint, and after the final adapter but before the summary), each resumed to files identical to an
uninterrupted run's (``benchmarks/learning/kill_resume.py``; about 30 s)."""
import shutil

from agents.run_folder import claim_run_folder
from benchmarks.learning import kill_resume


def test_two_kills_resume_identically(tmp_path, capsys):
    result = kill_resume.main(["--kills", "2", "--phases", "checkpoint,adapter",
                               "--out", str(tmp_path / "kr")])
    out = capsys.readouterr().out
    assert [t.phase for t in result.trials] == ["checkpoint", "adapter"]
    assert all(t.killed for t in result.trials), out
    assert result.identical == 2, out
    assert "2 of 2 kills resumed identically" in out
    assert {"uninterrupted", "kill_000", "kill_001"} <= {p.name for p in (tmp_path / "kr").iterdir()}


def test_a_resume_that_started_over_is_caught(tmp_path, capsys):
    """Files alone cannot tell a resume from a restart: a run whose checkpoints and logs were emptied after
    the kill ends with the same files, and only its own word on where it went on shows it started over."""
    def start_over(folder):
        for path in folder.iterdir():
            if path.name == "checkpoints" or path.suffix in (".csv", ".jsonl"):
                shutil.rmtree(path) if path.is_dir() else path.unlink()

    out = tmp_path / "kr"
    with claim_run_folder(out, resume=False, overwrite=False, what="test"):
        result = kill_resume.run(1, out, phases=["checkpoint_latest"], before_resume=start_over)
    trial, = result.trials
    assert trial.killed and trial.differs == []          # the same files as the uninterrupted run ...
    assert "started at iteration 1, but the kill left a checkpoint to go on at iteration" in trial.error
    assert result.identical == 0                         # ... and still not a resume


def test_resume_error_reads_the_resumed_process_line():
    line = "resume: restored iter_000002 (iteration 2): the run continues at iteration 3\n"
    assert kill_resume.resume_error(3, "warm start ...\n" + line) == ""
    assert "started at iteration 3" in kill_resume.resume_error(2, line)
    assert "said 0" in kill_resume.resume_error(1, "no such line\n")
