"""benchmarks/learning/episode_diff.py: two evaluations of one held-out set compared episode by episode."""
import json

import pytest

from benchmarks.learning import episode_diff


def evaluation(won, scores, actions=None):
    episodes = {"tasks": [f"goal{k}" for k in range(len(won))], "won": won, "scores": scores,
                "lengths": [len(a) for a in actions] if actions else None}
    if actions:
        episodes |= {"actions": actions, "refused_steps": [[] for _ in actions]}
    return {"episodes": episodes}


def test_changed_episodes_are_those_whose_win_or_score_moved_and_show_what_each_policy_did():
    a = evaluation([True, False, False, True], [1.0, 0.5, 0.0, 1.0],
                   [["search[x]", "click[b1]", "click[buy now]"], ["search[x]"], ["search[y]"],
                    ["search[z]"]])
    b = evaluation([True, True, False, False], [1.0, 1.0, 0.0, 0.25],
                   [["search[x]", "click[b1]", "click[buy now]"], ["click[b2]", "click[buy now]"],
                    ["search[y]"], ["click[b9]"]])
    b["episodes"]["refused_steps"][3] = [0]
    rows = episode_diff.changed_episodes(a, b)
    assert [r["episode"] for r in rows] == [1, 3]
    assert rows[0]["b"]["actions"] == ["click[b2]", "click[buy now]"] and rows[0]["a"]["score"] == 0.5
    summary = episode_diff.diff_summary(a, b)
    assert (summary["both"], summary["neither"], summary["gained"], summary["lost"]) == (1, 1, 1, 1)
    assert (summary["score_up"], summary["score_down"]) == (1, 1)
    assert summary["mean_length"] == [1.5, 1.75]
    text = episode_diff.format_diff(a, b, "warm", "rl", limit=1)
    assert "gained 1, lost 1" in text and "episode 1 (task goal1):" in text
    assert "rl: won, score 1.000: click[b2] | click[buy now]" in text
    assert "click[b9] [refused]" not in text and "1 more changed episodes" in text
    assert "click[b9] [refused]" in episode_diff.format_diff(a, b, limit=5)


def test_evaluations_kept_without_actions_compare_scores_only_and_other_episodes_are_refused(
        tmp_path, capsys):
    a, b = evaluation([False, True], [0.0, 1.0]), evaluation([True, True], [1.0, 1.0])
    assert "(actions not recorded)" in episode_diff.format_diff(a, b)
    other = evaluation([True], [1.0])
    with pytest.raises(ValueError, match="played different episodes"):
        episode_diff.changed_episodes(a, other)
    paths = []
    for name, ev in (("a", a), ("other", other)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(ev))
    with pytest.raises(SystemExit):
        episode_diff.main([str(p) for p in paths])
    assert "played different episodes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        episode_diff.main([str(paths[0]), str(tmp_path / "missing.json")])
    assert "no evaluation file" in capsys.readouterr().err
