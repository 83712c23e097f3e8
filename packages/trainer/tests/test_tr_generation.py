"""Generation: the KV cache computes what the full forward pass does, sampling obeys its settings, rows stop
where they should, nothing compiles per token, and bad requests are named errors."""

import contextlib
import dataclasses
import json
from collections import Counter
from collections.abc import Iterator

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import Tokenizer

import haliax_lite as hax
from meltemi.trainer.generate.generation import generate
from meltemi.trainer.generate.sampling import GenerationError, SamplingConfig
from meltemi.trainer.model.kv_cache import KVCache, forward_cached
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.trainer import Trainer

PROMPTS = [[5, 17, 200, 33, 91, 7, 64], [250, 3], [12, 13, 14, 15]]


@pytest.fixture(scope="module")
def model(make_config):
    """Initialized once for the module (0.1-0.2 CPU-s each time); a model is immutable, and generation
    donates no parameter."""
    return Llama.init(make_config().model, key=jax.random.key(3))


@pytest.fixture(scope="module")
def tools_model(make_config):
    """The chat tests' model with room for a template's tool definitions, initialized once."""
    return Llama.init(make_config("--model.max_seq_len", "512").model, key=jax.random.key(5))


@pytest.fixture
def tokenizer(corpus):
    return Tokenizer.from_file(corpus["tokenizer"])


def named(ids):
    return hax.named(jnp.asarray(ids, jnp.int32), ("batch", "position"))


@eqx.filter_jit  # for speed: eagerly each op of the forward pass compiled on its own
def _logits(model, ids):
    return model.logits(ids, hax.zeros_like(ids))


def full_logits(model, row):
    """The training forward pass over one unpadded row: (position, vocab)."""
    return np.asarray(_logits(model, named([row])).array[0])


# Generation runs it jitted (in `prefill` and `decode_chunk`); eagerly each op compiled on its own.
jitted_forward_cached = eqx.filter_jit(forward_cached)


def test_cached_prefill_and_steps_equal_the_full_forward_pass(model):
    row = PROMPTS[0]
    reference = full_logits(model, row)
    Batch = hax.Axis("batch", 1)
    cache = KVCache.init(model.config, Batch, slots=len(row), dtype=jnp.float32)
    pad = hax.named(jnp.zeros(1, int), "batch")
    logits, cache = jitted_forward_cached(model, named([row[:3]]), jnp.int32(0), pad, cache)
    np.testing.assert_allclose(logits.array[0], reference[2], rtol=1e-5, atol=1e-5)
    for t in range(3, len(row)):
        logits, cache = jitted_forward_cached(model, named([[row[t]]]), jnp.int32(t), pad, cache)
        np.testing.assert_allclose(logits.array[0], reference[t], rtol=1e-5, atol=1e-5)


def test_a_left_padded_row_computes_what_it_computes_alone(model):
    short = PROMPTS[1]
    Batch = hax.Axis("batch", 2)
    cache = KVCache.init(model.config, Batch, slots=5, dtype=jnp.float32)
    ids = named([[9, 9, 9, *short], [1, 2, 3, 4, 5]])
    pad = hax.named(jnp.array([3, 0]), "batch")
    logits, _ = jitted_forward_cached(model, ids, jnp.int32(0), pad, cache)
    np.testing.assert_allclose(logits.array[0], full_logits(model, short)[-1], rtol=1e-5, atol=1e-5)


def test_greedy_with_the_cache_equals_recomputing_the_full_forward_each_token(model):
    settings = SamplingConfig(max_new_tokens=20)
    cached = generate(model, PROMPTS, settings, chunk=7)
    recomputed = generate(model, PROMPTS, settings, use_cache=False)
    assert [c.tokens for c in cached.completions] == [c.tokens for c in recomputed.completions]
    alone = [generate(model, [p], settings).completions[0].tokens for p in PROMPTS]
    assert [c.tokens for c in cached.completions] == alone
    assert all(len(c.tokens) == 20 and c.stop_reason == "length" for c in cached.completions)
    assert cached.tokens_per_second > 0 and cached.new_tokens == 60


def test_padded_prompts_and_rows_reuse_one_program_and_change_no_token(model):
    settings = SamplingConfig(max_new_tokens=11)  # a length no other test compiles for
    plain = [generate(model, [p], settings).completions[0].tokens for p in PROMPTS]
    with traces() as counted:
        padded = [generate(model, [p], settings, prompt_multiple=16, min_rows=4).completions for p in PROMPTS]
    assert [c[0].tokens for c in padded] == plain and all(len(c) == 1 for c in padded)
    assert counted == {"prefill": 1, "decode_chunk": 1}  # prompts of 7, 2 and 4 tokens: one shape
    with pytest.raises(GenerationError, match="^prompt_multiple must be a positive number, got 0$"):
        generate(model, PROMPTS, settings, prompt_multiple=0)
    drawn = dataclasses.replace(settings, temperature=1.0, seed=3)  # a draw depends on n, not on the slot
    plain = [generate(model, [p], drawn).completions[0].tokens for p in PROMPTS]
    padded = [generate(model, [p], drawn, prompt_multiple=16, min_rows=4).completions for p in PROMPTS]
    assert [c[0].tokens for c in padded] == plain


def test_top_k_one_is_greedy_and_a_seed_fixes_the_draws(model):
    greedy = generate(model, PROMPTS, SamplingConfig(max_new_tokens=12)).completions
    top1 = generate(model, PROMPTS, SamplingConfig(max_new_tokens=12, temperature=1.5, top_k=1, seed=4))
    assert [c.tokens for c in top1.completions] == [c.tokens for c in greedy]
    sampled = SamplingConfig(max_new_tokens=12, temperature=1.0, top_p=0.9, top_k=50, seed=1)
    a = generate(model, PROMPTS, sampled).completions
    b = generate(model, PROMPTS, sampled).completions
    other = generate(model, PROMPTS, SamplingConfig(**{**sampled.__dict__, "seed": 2})).completions
    assert a == b
    assert [c.tokens for c in a] != [c.tokens for c in other]
    assert [c.tokens for c in a] != [c.tokens for c in greedy]


def test_a_row_stops_at_eos_and_keeps_it_while_the_others_go_on(model):
    settings = SamplingConfig(max_new_tokens=10)
    free = generate(model, PROMPTS, settings).completions
    eos = free[1].tokens[3]
    stopped = generate(model, PROMPTS, settings, eos_token_id=eos).completions
    first = free[1].tokens.index(eos)
    assert stopped[1].tokens == free[1].tokens[: first + 1] and stopped[1].stop_reason == "eos"
    for free_row, row in zip(free, stopped, strict=True):
        if eos not in free_row.tokens:
            assert row.tokens == free_row.tokens and row.stop_reason == "length"


def test_a_stop_string_ends_the_text_before_it(model, tokenizer):
    prompts = ["def main(", "import os\n"]
    settings = SamplingConfig(max_new_tokens=24)
    free = generate(model, prompts, settings, tokenizer=tokenizer).completions
    text = free[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip(), f"pick a visible stop string from {text!r}"
    settings = SamplingConfig(max_new_tokens=24, stop_strings=(stop,))
    stopped = generate(model, prompts, settings, tokenizer=tokenizer, chunk=4).completions
    assert stopped[0].stop_reason == "stop_string"
    assert stopped[0].text == text[: text.index(stop)]
    assert len(stopped[0].tokens) < len(free[0].tokens)
    assert stop in tokenizer.decode(list(stopped[0].tokens))
    assert free[0].tokens[: len(stopped[0].tokens)] == stopped[0].tokens


@contextlib.contextmanager
def traces() -> Iterator[Counter]:
    """How many times each of generation's programs is traced (compiled) inside, from JAX's own events."""
    counted: Counter = Counter()

    def listen(event: str, duration: float, **fields) -> None:
        if event == "/jax/core/compile/jaxpr_trace_duration" and fields.get("fun_name") in PROGRAMS:
            counted[fields["fun_name"]] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield counted
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


PROGRAMS = ("prefill", "decode_chunk")


def test_decoding_compiles_once_not_per_token_chunk_seed_stop_string_or_sampling_value(model, tokenizer):
    settings = SamplingConfig(max_new_tokens=29)  # a length no other test compiles for
    with traces() as first:
        generate(model, PROMPTS, settings, chunk=4)
    assert first == {"prefill": 1, "decode_chunk": 1}  # the counter sees a new shape's programs
    with traces() as again:
        generate(model, [[t + 1 for t in p] for p in PROMPTS], settings, chunk=4)  # same shapes, 8 chunks
        generate(model, [[7] * 7, [8], [9]], settings, chunk=4)
        generate(model, PROMPTS, settings, chunk=7)  # another chunk size
    assert again == {}
    with traces() as other_draws:  # another seed or stop string: the same programs
        for other in ({"seed": 5}, {"stop_strings": ("x",)}):
            generate(model, PROMPTS, dataclasses.replace(settings, **other), chunk=4, tokenizer=tokenizer)
    assert other_draws == {}
    sampled = dataclasses.replace(settings, temperature=0.7, top_k=40, top_p=0.9)
    with traces() as first_draws:
        generate(model, PROMPTS, sampled, chunk=4)
    assert first_draws == {"decode_chunk": 1}  # drawing is another program than greedy
    with traces() as other_values:  # another temperature, top-p or top-k (in k's power of two): the same
        others = ({"temperature": 1.3}, {"top_p": 0.5}, {"temperature": 0.2, "top_p": 0.99}, {"top_k": 50})
        for other in others:
            generate(model, PROMPTS, dataclasses.replace(sampled, **other), chunk=4)
    assert other_values == {}


def test_the_model_sharded_as_trained_generates_the_same_tokens(make_config, run_dir):
    config = make_config("--trainer.mesh.data", "2", "--trainer.mesh.model", "2")
    trainer = Trainer(config, run_dir, devices=jax.devices()[:4], progress=False)
    sharded = trainer.initial_state().model
    assert len(sharded.layers.stacked.mlp.up_proj.weight.array.sharding.device_set) == 4
    local = jax.device_put(sharded, jax.devices()[0])
    settings = SamplingConfig(max_new_tokens=8)
    ours = generate(sharded, PROMPTS, settings, plan=trainer.plan).completions
    assert [c.tokens for c in ours] == [c.tokens for c in generate(local, PROMPTS, settings).completions]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer, got 0"),
        ({"temperature": -1.0}, r"temperature must be >= 0 \(0: greedy\), got -1.0"),
        ({"top_k": 0}, "top_k must be a positive integer or None, got 0"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\] or None, got 1.5"),
        ({"stop_strings": "END"}, "stop_strings must be a tuple of non-empty strings"),
    ],
)
def test_bad_settings_are_named(fields, message):
    with pytest.raises(GenerationError, match=f"^{message}"):
        SamplingConfig(**fields)


def test_bad_requests_are_named(model, tokenizer):
    settings = SamplingConfig(max_new_tokens=4)
    cases = [
        (([[1, 2], [3, 999]],), {}, r"^prompt 1: token id 999 is outside the vocabulary \(0..383\)$"),
        (([[1], []],), {}, "^prompt 1 is empty"),
        ((["text"],), {}, "^prompt 0 is text: pass tokenizer= to encode it$"),
        (([],), {}, "^prompts must be a non-empty list"),
        (([[1] * 62],), {}, r"^the longest prompt \(62 tokens\) plus max_new_tokens \(4\) exceeds model"),
        (([[1]],), {"chunk": 0}, "^chunk must be a positive number, got 0$"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(GenerationError, match=message):
            generate(model, *args, settings, **kwargs)
    with pytest.raises(GenerationError, match="^stop_strings need the tokenizer"):
        generate(model, [[1]], SamplingConfig(stop_strings=("x",)))
    with pytest.raises(GenerationError, match="test_tr_generation.py.: not a Hugging Face tokenizer.json"):
        generate(model, ["x"], settings, tokenizer=__file__)


def test_a_chat_that_outgrows_the_model_forgets_its_oldest_exchanges_only_when_asked(model, tokenizer):
    from meltemi.datastore.chat.template import ChatTemplate
    from meltemi.trainer.generate.chat import ChatSession, chat_prompt_ids
    from meltemi.trainer.generate.sampling import ConversationTooLongError

    template, settings = ChatTemplate.llama3(), SamplingConfig(max_new_tokens=4, temperature=0.0)
    room = model.config.max_seq_len - settings.max_new_tokens

    def session(forget_oldest):
        return ChatSession(
            model, tokenizer, template, [], settings, system="Be brief.", forget_oldest=forget_oldest
        )

    strict, forgetful = session(False), session(True)
    said = 0
    while True:  # until the strict session's conversation is full
        message = f"def f{said}(): pass"
        try:
            strict.say(message)
        except ConversationTooLongError:
            break
        said += 1
    assert said >= 1 and len(strict.history) == 2 * said  # the refused message changed nothing
    for n in range(said + 3):
        forgetful.say(f"def f{n}(): pass")
        assert forgetful.history[-2]["content"] == f"def f{n}(): pass"
        assert len(chat_prompt_ids(template, tokenizer, [{"role": "system", "content": "Be brief."},
                                                         *forgetful.history[:-1]])) <= room  # fmt: skip
    assert forgetful.forgotten >= 3 and len(forgetful.history) == 2 * (said + 3 - forgetful.forgotten)
    kept, forgotten = list(forgetful.history), forgetful.forgotten
    with pytest.raises(ConversationTooLongError, match=r"exceeds model.max_seq_len \(64\)"):
        forgetful.say("x " * room)  # too long alone: the conversation is left as it was
    assert forgetful.history == kept and forgetful.forgotten == forgotten


@pytest.mark.parametrize("stop_strings", [(), ("turn", "te")])
def test_written_text_is_the_completions_text_and_grows_chunk_by_chunk(model, tokenizer, stop_strings):
    from meltemi.trainer.generate.streaming import UNFINISHED

    grew = 0
    for seed, chunk in [(0, 1), (1, 1), (2, 3), (3, 5)]:
        settings = SamplingConfig(max_new_tokens=24, temperature=1.5, seed=seed, stop_strings=stop_strings)
        pieces = []

        def write(piece, pieces=pieces):
            pieces.append(piece)
            assert not any(stop in "".join(pieces) for stop in stop_strings)  # never shown, then cut

        out = generate(model, ["def f(x):"], settings, tokenizer=tokenizer, eos_token_id=[7, 64], chunk=chunk,
                       write=write)  # fmt: skip
        assert "".join(pieces) == out.completions[0].text and all(pieces)
        assert not any(piece.endswith(UNFINISHED) for piece in pieces[:-1])
        grew += len(pieces) > 1
    assert grew >= 2  # written in several pieces, not all at the end
    streamed: list[str] = []  # by default, a written text arrives STREAMED_CHUNK (8) tokens at a time
    out = generate(
        model, ["def f(x):"], SamplingConfig(max_new_tokens=24), tokenizer=tokenizer, write=streamed.append
    )
    assert "".join(streamed) == out.completions[0].text and len(out.completions[0].tokens) == 24
    assert len(streamed) >= 3, streamed
    with pytest.raises(GenerationError, match="^write needs the tokenizer"):
        generate(model, [[1]], SamplingConfig(max_new_tokens=4), write=print)


def test_a_prompt_ending_in_a_lone_space_is_healed_and_its_text_follows_the_prompt_as_given(model, tokenizer):
    """'def ' is `def` and a lone space, which in training precedes alignment runs rather than names: healed,
    the space is taken back and the first new token must begin with it."""
    from meltemi.trainer.generate.healing import TokenTexts, heal_prompt

    ids = tokenizer.encode("def ").ids
    healed = heal_prompt(ids, TokenTexts(tokenizer, model.config.vocab_size))
    assert tokenizer.decode(ids[-1:]) == " " and healed == type(healed)(ids[:-1], " ")
    for seed in range(4):
        settings = SamplingConfig(max_new_tokens=6, temperature=2.0, seed=seed, stop_strings=(")",))
        pieces: list[str] = []
        out = generate(model, ["def "], settings, tokenizer=tokenizer, heal=True, write=pieces.append)
        first, completion = out.completions[0].tokens[0], out.completions[0]
        assert tokenizer.decode([first]).startswith(" ")  # the space taken back comes first
        assert tokenizer.decode(list(completion.tokens)).startswith(" ")
        whole = tokenizer.decode(list(completion.tokens))[1:]
        assert completion.text == (whole[: whole.index(")")] if ")" in whole else whole)
        assert "".join(pieces) == completion.text
    texts = TokenTexts(tokenizer, model.config.vocab_size)
    assert heal_prompt(ids[:1], texts) == type(healed)(ids[:1])  # one token: nothing would be left to run
    end = tokenizer.token_to_id("<|endoftext|>")
    assert heal_prompt([*ids, end], texts).prefix == ""  # a special token is never taken back


def test_a_checkpoints_text_prompts_are_healed_unless_told_not_to(base):
    """`apps/sample.py` and the summary heal; `--no-token-healing` (heal=False) runs the prompt as encoded."""
    from meltemi.trainer.checkpoint.trained_model import load_model
    from meltemi.trainer.generate.generation import sample_checkpoint

    trained = load_model(base)
    tokenizer = Tokenizer.from_file(trained.tokenizer)
    settings = SamplingConfig(max_new_tokens=8)
    healed = sample_checkpoint(base, ["def "], settings)[0].completions[0]
    exact = sample_checkpoint(base, ["def "], settings, heal=False)[0].completions[0]
    plain = generate(trained.model, [tokenizer.encode("def ").ids], settings, tokenizer=tokenizer,
                     eos_token_id=trained.end_of_text.stop_ids).completions[0]  # fmt: skip
    assert exact.tokens == plain.tokens
    assert tokenizer.decode([healed.tokens[0]]).startswith(" ")  # the space, taken back, comes first


def test_a_stream_holds_back_what_may_begin_a_stop_string_and_a_character_still_being_spelled():
    from tokenizers import decoders, models

    from meltemi.trainer.generate.streaming import TextStream

    words = {"a": 0, "tu": 1, "rn": 2, "ta": 3, "<eot>": 4, "Ã": 5, "¤": 6}  # bytes 0xC3 0xA4: "ä"
    byte_level = Tokenizer(models.WordLevel(words, unk_token="a"))
    byte_level.decoder = decoders.ByteLevel()
    pieces = []
    stream = TextStream(byte_level, stop_ids=[4], stop_strings=["turn"], write=pieces.append)
    for row in ([0], [0, 1], [0, 1, 3], [0, 1, 3, 1], [0, 1, 3, 1, 2, 0]):
        stream([row])
    assert pieces == ["a", "tuta"]  # "tu" waited for "ta"; the second "tu" began "turn", the stop
    stream.finish("atuta")
    pieces.clear()
    stream = TextStream(byte_level, stop_ids=[4], write=pieces.append)
    for row in ([0, 5], [0, 5, 6], [0, 5, 6, 4, 0]):
        stream([row])
    assert pieces == ["a", "ä"]  # the first byte of "ä" alone is not written as U+FFFD


def test_a_chat_compiles_once_per_doubling_of_its_length_and_padding_changes_no_reply(make_config, tokenizer):
    """Each turn's prompt is longer than the last; padded to a power of two, seven turns compile three
    shapes (64, 128, and 251: the model's 256 positions less the reply's 5), not seven, and each reply is
    the unpadded prompt's."""
    from meltemi.datastore.chat.template import ChatTemplate
    from meltemi.trainer.generate.chat import ChatSession, chat_prompt_ids

    model = Llama.init(make_config("--model.max_seq_len", "256").model, key=jax.random.key(5))
    template, settings = ChatTemplate.llama3(), SamplingConfig(max_new_tokens=5, temperature=0.0)
    session = ChatSession(model, tokenizer, template, [], settings, system="Be brief.")
    lengths = []
    with traces() as counted:
        for n in range(7):
            session.say(f"def f{n}(a): return a")
            prompt = [{"role": "system", "content": "Be brief."}, *session.history[:-1]]
            lengths.append(len(chat_prompt_ids(template, tokenizer, prompt)))
            alone = generate(model, [chat_prompt_ids(template, tokenizer, prompt)], settings)
            assert session.last.tokens == alone.completions[0].tokens
    assert lengths[0] <= 64 < lengths[1] <= lengths[2] <= 128 < lengths[3] and lengths[-1] <= 251, lengths
    assert counted["decode_chunk"] - 7 == 3  # the unpadded calls compile one program a turn


TOOLS_TEMPLATE = (
    "{% if tools %}<|start_header_id|>system<|end_header_id|>\n\nTools: {{ tools | tojson }}<|eot_id|>"
    "{% endif %}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}"
    "<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% endif %}"
)
ADD = {"type": "function", "function": {"name": "add_numbers", "parameters": {"type": "object"}}}


def test_a_chat_shows_the_model_its_tools_at_every_turn_and_a_template_without_them_is_refused(
    tools_model, tokenizer, tmp_path, s3
):
    from meltemi.datastore.chat.template import ChatTemplate
    from meltemi.datastore.storage import Directory
    from meltemi.trainer.generate.chat import ChatSession, chat_prompt_ids
    from meltemi.trainer.generate.chat_files import read_tools

    (tmp_path / "tools.json").write_text(json.dumps([ADD]))
    bucket = s3.bucket_url()
    Directory(bucket).write_text("tools.json", json.dumps([ADD]))
    tools = read_tools(tmp_path / "tools.json")
    assert tools == read_tools(f"{bucket}/tools.json") == (ADD,)
    model = tools_model
    template, settings = ChatTemplate(TOOLS_TEMPLATE, "tools.jinja"), SamplingConfig(max_new_tokens=3)
    with_tools = ChatSession(model, tokenizer, template, [], settings, tools=tools)
    without = ChatSession(model, tokenizer, template, [], settings)
    said = [{"role": "user", "content": "Add 2 and 3."}]
    shown = tokenizer.decode(chat_prompt_ids(template, tokenizer, said, tools))
    assert "add_numbers" in shown and "add_numbers" not in tokenizer.decode(
        chat_prompt_ids(template, tokenizer, said)
    )
    for session in (with_tools, without):
        session.say("Add 2 and 3.")
        session.say("And 4?")
    prompt = chat_prompt_ids(template, tokenizer, [*with_tools.history[:-1]], tools)
    assert with_tools.last.tokens == generate(model, [prompt], settings).completions[0].tokens
    with pytest.raises(
        GenerationError,
        match=r"chat template the shipped llama3 template: it never reads tools, so the model would not",
    ):
        ChatSession(model, tokenizer, ChatTemplate.llama3(), [], settings, tools=tools)


@pytest.mark.parametrize(
    "written, error",
    [
        (None, r"tools\.json: no such file"),
        ("[{", r"tools\.json: not JSON \(Expecting"),
        ('{"name": "add"}', r"tools\.json: 'tools' is an object, not a list of tool definitions"),
        ("[]", r"tools\.json: holds no tool definitions"),
    ],
)
def test_a_tools_file_that_is_not_a_list_of_tool_definitions_is_one_line_naming_it(tmp_path, written, error):
    from meltemi.trainer.generate.chat_files import read_tools

    if written is not None:
        (tmp_path / "tools.json").write_text(written)
    with pytest.raises(GenerationError, match=rf"^--tools .*{error}"):
        read_tools(tmp_path / "tools.json")


def test_a_chat_goes_on_with_a_saved_conversation_and_answers_a_tools_result(
    tools_model, tokenizer, tmp_path
):
    from meltemi.datastore.chat.template import ChatTemplate
    from meltemi.trainer.generate.chat import ChatSession, chat_prompt_ids
    from meltemi.trainer.generate.chat_files import read_conversation

    call = {"type": "function", "function": {"name": "add_numbers", "arguments": {"a": 2, "b": 3}}}
    said = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "5"},
    ]
    (tmp_path / "chat.json").write_text(json.dumps({"messages": said, "tools": [ADD]}))
    saved = read_conversation(tmp_path / "chat.json")
    assert saved.messages == tuple(said) and saved.tools == (ADD,)
    model = tools_model
    template, settings = ChatTemplate(TOOLS_TEMPLATE, "tools.jinja"), SamplingConfig(max_new_tokens=3)
    session = ChatSession(model, tokenizer, template, [], settings, tools=saved.tools)
    session.go_on(saved.messages)
    assert session.system == "Use the tools." and session.awaits_reply
    session.answer()  # to the tool's result: the conversation as the file holds it, tools shown
    prompt = chat_prompt_ids(template, tokenizer, said, saved.tools)
    assert session.last.tokens == generate(model, [prompt], settings).completions[0].tokens
    assert session.history[-1]["role"] == "assistant" and not session.awaits_reply
    with pytest.raises(
        GenerationError, match=r"^nothing to reply to: the conversation ends with the assistant's"
    ):
        session.answer()
    session.say("8", role="tool")
    ids = chat_prompt_ids(template, tokenizer, [said[0], *session.history[:-1]], saved.tools)
    shown = tokenizer.decode(ids, skip_special_tokens=False)
    assert (
        shown.count("<|start_header_id|>tool<|end_header_id|>") == 2
        and "tool<|end_header_id|>\n\n8<|" in shown
    )
    with pytest.raises(GenerationError, match=r"a user's or a tool's, not 'assistant'"):
        session.say("x", role="assistant")
    briefed = ChatSession(model, tokenizer, template, [], settings, system="Be brief.")
    with pytest.raises(
        GenerationError, match=r"opens with its own system message: give it there or with --system"
    ):
        briefed.go_on(said)


@pytest.mark.parametrize(
    "written, error",
    [
        (None, r"chat\.json: no such file"),
        ("[{", r"chat\.json: not JSON \(Expecting"),
        ('{"conversation": []}', r"chat\.json: field 'messages' is null, not a non-empty list of messages"),
        (
            '[{"role": "user", "content": 1}]',
            r"chat\.json: message 1 has no string 'content' \(it is a number\)",
        ),
        (
            '{"messages": [{"role": "user", "content": "x"}], "tools": {}}',
            r"chat\.json: 'tools' is an object",
        ),
    ],
)
def test_a_conversation_file_that_is_not_one_is_one_line_naming_it(tmp_path, written, error):
    from meltemi.trainer.generate.chat_files import read_conversation

    if written is not None:
        (tmp_path / "chat.json").write_text(written)
    with pytest.raises(GenerationError, match=rf"^--conversation .*{error}"):
        read_conversation(tmp_path / "chat.json")


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_a_saved_conversation_reads_back_as_it_was_written_and_another_file_is_never_replaced(
    tmp_path, s3, where
):
    from meltemi.datastore.storage import read_object
    from meltemi.trainer.generate.chat_files import read_conversation, write_conversation

    folder = str(tmp_path) if where == "local" else s3.bucket_url()
    call = {"type": "function", "function": {"name": "add_numbers", "arguments": {"a": 2, "b": 3}}}
    said = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Add 2 and 3, «vite»."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "5."},
    ]
    target = f"{folder}/chats/chat.json"
    write_conversation(target, said, (ADD,))
    back = read_conversation(target)
    assert back.messages == tuple(said) and back.tools == (ADD,)
    assert "«vite»" in read_object(target).decode()  # written as text, not escaped
    with pytest.raises(GenerationError, match=r"^/save .*chat\.json: already exists, and this chat neither"):
        write_conversation(target, said[:2])
    assert read_conversation(target).messages == tuple(said)  # kept
    write_conversation(target, said[:2], replace=True)  # the chat's own file
    assert read_conversation(target).messages == tuple(said[:2]) and read_conversation(target).tools is None
    assert json.loads(read_object(target)) == said[:2]  # without tools: the plain list of messages
    for folder_named in (f"{folder}/chats/", str(tmp_path)):
        with pytest.raises(GenerationError, match=r"names a folder; name a file, e\.g\. .*/chat\.json$"):
            write_conversation(folder_named, said)
    with pytest.raises(GenerationError, match=r"^/save .*empty\.json: nothing has been said yet"):
        write_conversation(f"{folder}/empty.json", [])
    assert read_object(f"{folder}/empty.json") is None


@pytest.mark.parametrize(
    "message, read",
    [
        ("/save chat.json", ("save", "chat.json")),
        ("/save  ", ("save", "")),
        ("/save! chat.json", ("save!", "chat.json")),
        ("/SAVE   s3://b/c.json  ", ("save", "s3://b/c.json")),
        ("/tool", ("tool", "")),
        ('/tool {"sum": 5} ', ("tool", '{"sum": 5} ')),
        ("/tool\n[1,\n2]", ("tool", "[1,\n2]")),
        ("/?", ("help", "")),
        ("/exit", ("bye", "")),
        ("/clear", ("clear", "")),
        ("//clear the cache", "/clear the cache"),
        ("/usr/lib holds what?", "/usr/lib holds what?"),
        ("/tools?", "/tools?"),
        ("a /save in the middle", "a /save in the middle"),
        ("/", "/"),
    ],
)
def test_a_message_is_a_command_only_when_its_first_word_names_one(message, read):
    from meltemi.trainer.generate.chat_commands import Command, read_command

    expected = Command(*read) if isinstance(read, tuple) else read
    assert read_command(message) == expected


@pytest.mark.parametrize(
    "message, error",
    [
        ("/sav chat.json", r"^/sav: no such command; /help lists them \(a message that begins with / is"),
        ("/clear all", r"^/clear takes nothing after it \(given 'all'\)$"),
    ],
)
def test_a_mistyped_command_is_refused_naming_it(message, error):
    from meltemi.trainer.generate.chat_commands import ChatCommandError, read_command

    with pytest.raises(ChatCommandError, match=error):
        read_command(message)


def test_the_help_lists_every_command_and_its_other_names():
    from meltemi.trainer.generate.chat_commands import COMMANDS, command_help

    shown = command_help()
    assert len(shown.splitlines()) == len(COMMANDS) + 1
    for spec in COMMANDS:
        assert f"/{spec.name}" in shown and all(f"/{alias}" in shown for alias in spec.aliases)
    assert "/save [FILE] " in shown and "/tool [RESULT] " in shown and "(also /exit, /quit)" in shown
