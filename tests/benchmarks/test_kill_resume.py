"""Crash consistency in CI: two runs SIGKILLed where a kill used to leave wrong files (half-way through a
checkpoint, and after the final adapter but before the summary), each resumed to files identical to an
uninterrupted run's (``benchmarks/learning/kill_resume.py``; about 30 s)."""
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
