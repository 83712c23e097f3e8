"""The chat recipe as one typed object: its manifest form read back as the same recipe (and an earlier,
shorter record with the defaults), its identity what decides a store's bytes, a chat store named as a
template, and a build given the recipe whole making the store its options make."""

import json

import pytest

from meltemi.datastore import TokenStore, build_store
from meltemi.datastore.chat.recipe import ChatRecipe, load_template
from meltemi.datastore.chat.stdlib import stdlib_chat
from meltemi.datastore.chat.template import ChatTemplate
from meltemi.datastore.errors import ChatTemplateError

OPTIONS = {"chunk_tokens": 512, "shard_tokens": 4096, "progress": False}
GEMMA = "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"


def test_the_manifest_form_reads_back_as_the_same_recipe_and_names_what_it_cannot_read():
    named = ChatRecipe(ChatTemplate(GEMMA, "gemma.jinja", {"bos_token": "<bos>"}), "all", 65, "drop", "<end>")
    for recipe in (named, ChatRecipe(ChatTemplate.llama3())):
        record = json.loads(json.dumps(recipe.to_manifest()))  # as a manifest holds it
        assert ChatRecipe.from_manifest(record, "m.json") == recipe
        assert ChatRecipe.from_manifest(record, "m.json").cache_key() == recipe.cache_key()
    assert named.to_manifest()["end_of_turn"] == "<end>" and named.to_manifest()["assistant_tokens"] is None
    earlier = {"template": GEMMA, "special_tokens": {"eos_token": "<end_of_turn>"}, "added_tokens": []}
    old = ChatRecipe.from_manifest(earlier, "run/step-2/manifest.json")  # a checkpoint's before the recipe
    assert (old.template.source, old.turn_end, old.loss_on, old.max_tokens) == (
        "run/step-2/manifest.json",
        "<end_of_turn>",
        "assistant",
        None,
    )
    with pytest.raises(ChatTemplateError, match=r"^m.json: chat.template_sha256 is not the hash of"):
        ChatRecipe.from_manifest(named.to_manifest() | {"template_sha256": "0" * 64}, "m.json")
    with pytest.raises(ChatTemplateError, match=r"^m.json: chat: overlong must be one of truncate, drop"):
        ChatRecipe.from_manifest(named.to_manifest() | {"overlong": "cut"}, "m.json")


def test_the_identity_is_what_decides_the_bytes_and_not_where_the_template_came_from():
    shipped = ChatRecipe(ChatTemplate.llama3(), max_tokens=257)
    elsewhere = ChatRecipe(ChatTemplate(shipped.template.text, "copy.jinja"), max_tokens=257)
    assert elsewhere.cache_key() == shipped.cache_key()
    assert (
        ChatRecipe(shipped.template, max_tokens=257, end_of_turn="<|eot_id|>").cache_key()
        == shipped.cache_key()
    )
    other_bos = ChatTemplate(
        shipped.template.text, "copy.jinja", {"bos_token": "<s>", "eos_token": "<|eot_id|>"}
    )
    differ = [
        ChatRecipe(shipped.template, max_tokens=129),
        ChatRecipe(shipped.template, "all", 257),
        ChatRecipe(shipped.template, max_tokens=257, overlong="drop"),
        ChatRecipe(shipped.template, max_tokens=257, end_of_turn="<|end_header_id|>"),
        ChatRecipe(other_bos, max_tokens=257),
    ]
    assert len({r.cache_key() for r in [shipped, *differ]}) == 6


def test_a_recipe_given_whole_builds_the_store_its_options_build_and_a_chat_store_names_its_template(
    tmp_path, stdlib_files, tokenizer_path
):
    chats = stdlib_chat(tmp_path / "chat.jsonl", files=stdlib_files[:2])
    by_options = build_store(
        chats, tokenizer_path, tmp_path / "options", format="chat", max_tokens=300, **OPTIONS
    )
    recipe = ChatRecipe(load_template("llama3"), max_tokens=300)
    whole = build_store(chats, tokenizer_path, tmp_path / "recipe", recipe=recipe, **OPTIONS)
    assert whole.documents == by_options.documents > 0
    stores = [TokenStore.open(tmp_path / name) for name in ("options", "recipe")]
    assert stores[0].manifest["content_sha256"] == stores[1].manifest["content_sha256"]
    assert stores[0].manifest["chat"] == stores[1].manifest["chat"]
    assert stores[0].manifest["options"] == stores[1].manifest["options"]
    assert ChatRecipe.from_manifest(stores[1].manifest["chat"], "m") == recipe
    assert load_template(tmp_path / "recipe") == recipe.template  # the template it was built with
    with pytest.raises(ValueError, match=r"give a chat recipe or its options \(chat_template, loss_on"):
        build_store(chats, tokenizer_path, tmp_path / "both", recipe=recipe, loss_on="all", **OPTIONS)
    with pytest.raises(ChatTemplateError, match=r"no such file \(give llama3, .* or a chat store\)"):
        load_template(tmp_path / "nothing")
