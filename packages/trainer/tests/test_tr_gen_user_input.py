"""A chat's user messages read from lines: one per non-blank line, or several lines between triple quotes
as one message (code pasted at the prompt), none lost at the end of the input."""

from hypothesis import given
from hypothesis import strategies as st

from meltemi.trainer.generate.user_input import FENCE, UserMessages

line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12)
plain_line = line.filter(lambda text: text.strip() and FENCE not in text)
message = st.one_of(  # a message of one line, or of several (blank ones inside too) between fences
    plain_line,
    st.lists(line.filter(lambda text: FENCE not in text), min_size=1, max_size=5)
    .map("\n".join)
    .filter(lambda text: text.strip() and text.splitlines()[0].strip() and text.splitlines()[-1].strip()),
)


def typed(text: str) -> list[str]:
    """The lines a user types for the message ``text``, as a terminal or a pipe gives them."""
    if "\n" not in text:
        return [text + "\n"]
    return [f"{FENCE}\n", *(piece + "\n" for piece in text.split("\n")), f"{FENCE}\n"]


@given(st.lists(message, max_size=6), st.lists(st.sampled_from(["", "   "]), max_size=6))
def test_the_messages_typed_are_the_messages_read_blank_lines_between_them_skipped(messages, blanks):
    lines = []
    for i, text in enumerate(messages):
        lines += typed(text) + [blank + "\n" for blank in blanks[i : i + 1]]
    assert list(UserMessages(lines)) == messages


def test_the_fences_may_share_a_line_with_the_text_and_an_open_message_ends_with_the_input():
    assert list(UserMessages(['"""Describe this:', "def f():", '    pass"""'])) == [
        "Describe this:\ndef f():\n    pass"
    ]
    assert list(UserMessages(['  """one line"""  ', '""""""', '"""', "   ", '"""'])) == ["one line"]
    unfinished = UserMessages(["Hi", '"""', "unfinished", "code"])
    assert list(unfinished) == ["Hi", "unfinished\ncode"] and not unfinished.open


def test_a_terminal_prompt_knows_when_a_message_is_open():
    prompts = []
    messages = UserMessages([])

    def typed_lines():
        for text in ["Hi", '"""', "def f():", '"""', "Bye"]:
            prompts.append("... " if messages.open else "> ")
            yield text

    messages.lines = typed_lines()
    assert list(messages) == ["Hi", "def f():", "Bye"]
    assert prompts == ["> ", "> ", "... ", "... ", "> "]
