"""benchmarks/speed/env_speed.py runs its TextCraft section end to end (the other sections need their
engines' data and take minutes; their --help runs in test_index)."""
from benchmarks.speed import env_speed


def test_textcraft_section_plays_every_scripted_episode_to_its_end(capsys):
    env_speed.main(["textcraft", "--episodes", "3", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "TextCraft, 3 episodes" in out and "ratio ours (warm caches) / reference" in out
