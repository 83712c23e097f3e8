"""The user's message a held-out conversation's prompt holds, read back from its tokens: what a chat run's
summary replies to when the data is the user's own (``trainer.reply_to: held_out``), so the before and after
show their own task instead of the shipped corpus's prompt.

A chat store keeps tokens, not messages. The prompt of a conversation (its tokens up to the first trained
one: ``RunData.held_out_prompt``) is decoded, and the run's template says where the user's words are in
it: rendering one user message (a marker) with the generation prompt gives the text before a user's
message and the text after it up to the assistant's first word; the message is what lies between the last
match of the first (the longest end of it found) and that ending.
"""

from __future__ import annotations

from collections.abc import Sequence

MARKER = "\ue000meltemi\ue001"  # private-use characters: in no template and no user's message


def first_user_message(prompt_ids: Sequence[int], tokenizer, template) -> str:
    """The last user message of a conversation's prompt (``prompt_ids``, ending where the assistant's reply
    begins), by ``template`` (a ``ChatTemplate``) and ``tokenizer`` (a ``tokenizers.Tokenizer``); when the
    template's layout is not found in the decoded prompt, its text without special tokens, stripped.

    >>> from meltemi.datastore.chat.template import ChatTemplate
    >>> class Characters:  # a tokenizer whose ids are characters
    ...     def decode(self, ids, skip_special_tokens=True):
    ...         return "".join(map(chr, ids))
    >>> template = ChatTemplate.llama3()
    >>> messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]
    >>> rendered = template.render(messages, add_generation_prompt=True, **template.special_tokens).text
    >>> first_user_message([ord(c) for c in rendered], Characters(), template)
    '2 + 2?'
    """
    decoded = tokenizer.decode(list(map(int, prompt_ids)), skip_special_tokens=False)
    probe = template.render(
        [{"role": "user", "content": MARKER}], add_generation_prompt=True, **template.special_tokens
    ).text
    before, found, after = probe.partition(MARKER)
    end = len(decoded) - len(after) if found and decoded.endswith(after) else -1
    for start in range(len(before)) if end >= 0 else ():
        at = decoded.rfind(before[start:], 0, end)
        if at >= 0:
            message = decoded[at + len(before) - start : end]
            if message.strip():
                return message
            break
    return tokenizer.decode(list(map(int, prompt_ids)), skip_special_tokens=True).strip()
