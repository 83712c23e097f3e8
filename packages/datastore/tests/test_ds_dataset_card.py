"""A data set's subsets and splits as the configs of its card (README.md) name them, as `load_dataset` reads
them: a data set of several subsets (SmolTalk's `all` beside each of its parts) is read once, not each
conversation as many times as subsets hold it."""

import json

import pytest

from meltemi.datastore import InputError, TokenStore, build_store
from meltemi.datastore.build.inputs.dataset_card import Subset, card_subsets, chosen_subset
from meltemi.datastore.build.inputs.sources import resolve_data_inputs
from meltemi.datastore.cli import main

OPTIONS = {"format": "chat", "progress": False}
CARD = """---
license: apache-2.0
configs:
- config_name: all
  data_files:
  - split: train
    path: data/all/train-*
  - split: test
    path: data/all/test-*
- config_name: math
  data_files:
  - split: train
    path: data/math/train-*
---
# A data set of several subsets
"""


def _conversations(count: int, topic: str) -> str:
    lines = []
    for i in range(count):
        messages = [{"role": "user", "content": f"{topic} {i}?"}, {"role": "assistant", "content": f"{i}."}]
        lines.append(json.dumps({"messages": messages}) + "\n")
    return "".join(lines)


@pytest.fixture
def dataset(tmp_path):
    """SmolTalk's layout: the `all` subset holds every conversation again beside each part's subset."""
    root = tmp_path / "smoltalk"
    files = {
        "README.md": CARD,
        "data/all/train-00000-of-00001.jsonl": _conversations(5, "all"),
        "data/all/test-00000-of-00001.jsonl": _conversations(2, "held out"),
        "data/math/train-00000-of-00001.jsonl": _conversations(3, "math"),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_subset_asked_for_is_read_and_its_other_splits_are_left_out(dataset, tmp_path, tokenizer_path):
    chosen = resolve_data_inputs([str(dataset)], subset="all")
    assert [f.rpartition("/")[2] for f in chosen.files] == ["train-00000-of-00001.jsonl"]
    assert "/all/" in chosen.files[0] and chosen.other_splits == {"test": 1} and chosen.subset == "all"
    report = build_store(dataset, tokenizer_path, tmp_path / "all", subset="all", **OPTIONS)
    assert report.documents == 5  # by file names alone, both subsets' train files: 8
    assert "(its train split of subset all read)" in report.summary()
    assert TokenStore.open(tmp_path / "all").manifest["subset"] == "all"
    math = build_store(dataset, tokenizer_path, tmp_path / "math", subset="math", **OPTIONS)
    assert math.documents == 3 and math.subset == "math"
    held_out = build_store(dataset, tokenizer_path, tmp_path / "test", subset="all", split="test", **OPTIONS)
    assert held_out.documents == 2


def test_a_card_of_several_subsets_and_no_default_needs_a_choice_said_as_the_caller_spells_it(
    dataset, tmp_path, tokenizer_path, capsys
):
    with pytest.raises(
        InputError, match=r"smoltalk'?: its README.md names the subsets all, math, and none is its "
    ):
        build_store(dataset, tokenizer_path, tmp_path / "none", **OPTIONS)
    assert not (tmp_path / "none").exists()
    command = [
        "build",
        "--input",
        str(dataset),
        "--tokenizer",
        tokenizer_path,
        "--out",
        str(tmp_path / "cli"),
    ]
    status = main([*command, "--format", "chat"])
    assert status == 1 and capsys.readouterr().err.rstrip().endswith("default: choose one (--subset NAME)")
    with pytest.raises(InputError, match=r"names the subsets all, math, not 'code'"):
        build_store(dataset, tokenizer_path, tmp_path / "none", subset="code", **OPTIONS)
    with pytest.raises(
        InputError, match=r"jsonl: not a data set's directory, so there is no subset 'all' to read"
    ):
        one_file = dataset / "data/all/train-00000-of-00001.jsonl"
        build_store(one_file, tokenizer_path, tmp_path / "f", subset="all", **OPTIONS)
    status = main([*command, "--format", "chat", "--subset", "math"])
    assert status == 0 and TokenStore.open(tmp_path / "cli").num_docs == 3


@pytest.mark.parametrize(
    "configs, default",
    [
        ("- config_name: all\n  data_files: data/all/train-*\n- config_name: math\n  default: true\n"
         "  data_files: data/math/train-*\n", "math"),
        ("- config_name: math\n  data_files: data/math/*\n- config_name: default\n  data_files: data/all/*\n",
         "default"),
        ("- config_name: only\n  data_files:\n  - data/math/train-00000-of-00001.jsonl\n", "only"),
    ],
)  # fmt: skip
def test_the_default_subset_is_the_one_marked_else_the_one_named_default_else_the_only_one(configs, default):
    subsets = card_subsets(f"---\nconfigs:\n{configs}---\n", "d")
    assert chosen_subset(subsets, None, "d").name == default


def test_a_subset_without_data_files_reads_the_splits_its_file_names_name(dataset):
    (dataset / "README.md").write_text("---\nconfigs:\n- config_name: default\n  sep: ','\n---\n")
    chosen = resolve_data_inputs([str(dataset)])
    assert len(chosen.files) == 2 and chosen.other_splits == {"test": 1} and chosen.subset == "default"
    (dataset / "README.md").write_text("---\nlicense: mit\n---\n# no configs\n")
    assert resolve_data_inputs([str(dataset)]).subset is None


@pytest.mark.parametrize(
    "header, error",
    [
        ("configs: [unclosed\n", r"README.md: its YAML header cannot be read \(while parsing"),
        ("configs: all\n", r"README.md: its configs are not a list of subsets"),
        ("configs:\n- data_files: a.jsonl\n", r"README.md: a subset in its configs has no config_name"),
        ("configs:\n- config_name: a\n  data_files: 3\n", r"subset 'a': data_files is not a pattern, a list"),
        ("configs:\n- config_name: a\n- config_name: a\n", r"the subset a is named twice"),
    ],
)
def test_a_card_whose_configs_cannot_be_read_is_an_error_naming_it(dataset, header, error):
    (dataset / "README.md").write_text(f"---\n{header}---\n")
    with pytest.raises(InputError, match=error):
        resolve_data_inputs([str(dataset)])


def test_patterns_match_as_the_hub_globs_them():
    subset = Subset("s", {"train": ("data/**/train-*", "./extra/[!x]*.jsonl"), "test": ("test?.json",)})
    assert subset.split_of("data/a/b/train-0.parquet") == "train"
    assert subset.split_of("data/train-0.parquet") == "train"  # ** matches no directory too
    assert subset.split_of("extra/a.jsonl") == "train" and subset.split_of("extra/x.jsonl") is None
    assert subset.split_of("test1.json") == "test" and subset.split_of("sub/test1.json") is None
    assert subset.split_of("data/a/valid-0.parquet") is None


def test_a_subsets_patterns_that_match_no_data_file_are_an_error_naming_them(dataset):
    (dataset / "README.md").write_text("---\nconfigs:\n- config_name: csv\n  data_files: data/*.csv\n---\n")
    with pytest.raises(InputError, match=r"the data_files of its subset 'csv' \(data/\*\.csv\) match none"):
        resolve_data_inputs([str(dataset)])


def test_a_text_build_reads_a_data_sets_directory_as_load_dataset_does_and_any_other_directory_whole(
    tmp_path, tokenizer_path
):
    """A pretraining corpus from the Hub (its card describes its data) gives its train split's rows, never
    its card or its test split; a directory of text files, whose README is one of them, is read whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    corpus = tmp_path / "wikitext"
    (corpus / "data").mkdir(parents=True)
    (corpus / "README.md").write_text(
        "---\ndataset_info:\n  features:\n  - name: text\n    dtype: string\n---\n# Wiki"
    )
    pq.write_table(
        pa.table({"text": ["one", "two", "three"]}), corpus / "data" / "train-00000-of-00001.parquet"
    )
    pq.write_table(pa.table({"text": ["held out"]}), corpus / "data" / "test-00000-of-00001.parquet")
    report = build_store(corpus, tokenizer_path, tmp_path / "wiki", progress=False)
    assert report.documents == 3 and report.other_splits == {"test": 1}
    assert "1 file of the data set's other splits left out (its train split read)" in report.summary()
    held_out = build_store(corpus, tokenizer_path, tmp_path / "test", split="test", progress=False)
    assert held_out.documents == 1
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "README.md").write_text("---\ntitle: A site's front matter\n---\n# Docs\n")
    (docs / "guide.md").write_text("A guide.\n")
    assert build_store(docs, tokenizer_path, tmp_path / "docs-store", progress=False).documents == 2
    (docs / "README.md").write_text("---\ntitle: [unclosed\n---\n# Docs\n")  # not YAML: a file like any other
    (docs / "app").mkdir()
    for name in ("state.json", "dataset_info.json"):  # save_to_disk's names, but not at the top: files too
        (docs / "app" / name).write_text('{"text": "a record"}\n')
    assert build_store(docs, tokenizer_path, tmp_path / "docs-2", progress=False).documents == 4
    with pytest.raises(InputError, match=r"docs'?: not a data set's directory, so there is no subset 'all'"):
        build_store(docs, tokenizer_path, tmp_path / "none", subset="all", progress=False)


def test_a_text_build_of_what_save_to_disk_wrote_reads_its_rows_not_its_records(tmp_path, tokenizer_path):
    import pyarrow as pa

    saved = tmp_path / "saved"
    saved.mkdir()
    table = pa.table({"text": ["one", "two"]})
    with (
        pa.OSFile(str(saved / "data-00000-of-00001.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as writer,
    ):
        writer.write_table(table)
    (saved / "dataset_info.json").write_text(json.dumps({"features": {"text": {"dtype": "string"}}}))
    (saved / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
    )
    assert build_store(saved, tokenizer_path, tmp_path / "store", progress=False).documents == 2


def test_a_subset_naming_a_data_dir_reads_the_splits_its_files_name_there(tmp_path):
    root = tmp_path / "multilingual"
    for name, count in (("en/train.jsonl", 3), ("en/test.jsonl", 1), ("fr/train.jsonl", 2)):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(_conversations(count, name))
    card = "---\nconfigs:\n- config_name: en\n  data_dir: en\n  default: true\n"
    card += "- config_name: fr\n  data_dir: fr/\n---\n"
    (root / "README.md").write_text(card)
    english, french = resolve_data_inputs([str(root)]), resolve_data_inputs([str(root)], subset="fr")
    assert [f.rpartition("/multilingual/")[2] for f in english.files] == ["en/train.jsonl"]
    assert english.other_splits == {"test": 1} and english.subset == "en"
    assert [f.rpartition("/multilingual/")[2] for f in french.files] == ["fr/train.jsonl"]
    (root / "README.md").write_text(card.replace("data_dir: fr/", "data_dir: de"))
    with pytest.raises(InputError, match=r"the data_dir of its subset 'fr' holds no data file"):
        resolve_data_inputs([str(root)], subset="fr")
