from agents.parsing import parse_action, parse_actions


def test_tagged_action_is_lowercased_and_stripped():
    assert parse_action("<think>ok</think><action>  Get 1 Oak Log </action>") == ("get 1 oak log", True)


def test_missing_tags_fall_back_to_tail_and_are_invalid():
    text = "I will now get some oak logs from the forest please"
    action, valid = parse_action(text)
    assert (action, valid) == (text.lower()[-30:], False)
    assert parse_action(text, fallback_chars=20)[0] == text.lower()[-20:]


def test_think_rules():
    assert parse_action("<action>go</action>") == ("go", False)
    assert parse_action("<action>go</action>", require_think=False) == ("go", True)
    # think tags are checked case-sensitively on the original text
    assert parse_action("<THINK>x</THINK><action>go</action>")[1] is False


def test_cjk_and_reversed_tags():
    assert parse_action("<think>好</think><action>go</action>")[1] is False
    assert parse_action("<think></think></action>go<action>") == ("", True)


def test_first_tags_win_and_vector_form():
    acts, valid = parse_actions(["<action>a</action><action>b</action>", "nothing"], require_think=False)
    assert acts[0] == "a" and valid == [True, False]
