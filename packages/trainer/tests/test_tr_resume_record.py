"""What a resume does to the run directory: a refused one changes nothing; an accepted one drops the steps its
checkpoint rolled back from the record (and keeps them aside); the summary speaks of the run as a whole."""

import ast
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from meltemi.datastore.storage import Directory, Location
from meltemi.trainer import trainer as trainer_module
from meltemi.trainer.config_io import describe_fields, dump_config
from meltemi.trainer.errors import CheckpointError, ConfigError, DataError
from meltemi.trainer.run.trackers import read_metrics, rewind_record
from meltemi.trainer.step.fake_devices import fake_devices_environ
from meltemi.trainer.trainer import Trainer

TOKENS_PER_STEP = 16 * 32  # make_config: 16 rows of 32 tokens
WANDB_OFFLINE = "{mode: offline, project: test}"


def recorded(make_config, *extra):
    """Six steps, a checkpoint every two (all kept), every step logged, an evaluation every two, batch hashes
    and TensorBoard on: a record with something at every step."""
    return make_config("--trainer.num_train_steps", "6", "--trainer.checkpoint_every", "2",
                       "--trainer.keep_every", "2", "--trainer.log_every", "1", "--trainer.eval_every", "2",
                       "--trainer.log_batch_hashes", "true", "--trainer.trackers.tensorboard", "true",
                       *extra)  # fmt: skip


def train(config, run_dir):
    return Trainer(config, run_dir, devices=jax.devices()[:1], progress=True).run()


@pytest.fixture
def finished(make_config, shared, tmp_path) -> Path:
    """A copy of a finished six-step ``recorded`` run (trained once per session) at ``tmp_path / "run"``."""
    built = shared.get("resume-record-run", lambda root: train(recorded(make_config), root / "run"))
    shutil.copytree(built / "run", tmp_path / "run")
    return tmp_path / "run"


def tree(root: Path) -> dict[str, str]:
    """Every file and folder under ``root``: a file by its bytes' hash, a folder by the word ``folder``."""
    return {
        str(p.relative_to(root)): "folder" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def steps_of(path: Path, key: str | None = None) -> list[int]:
    return [r["step"] for r in read_metrics(path) if key is None or key in r]


def tensorboard_steps(log_dir: Path, tag: str) -> list[int]:
    """The steps of ``tag`` TensorBoard shows: its event files in order, each session-start event hiding the
    events before it at its step or later (what ``SummaryWriter(purge_step=...)`` asks for)."""
    from tensorboardX.proto.event_pb2 import Event, SessionLog

    steps: list[int] = []
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):  # TFRecord frames: length (u64), its CRC (u32), the event, its CRC (u32)
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = Event.FromString(data[at + 12 : at + 12 + length])
            at += 16 + length
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                steps = [s for s in steps if s < event.step]
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return steps


def flip_a_byte(step_dir: Path) -> None:
    chunk = step_dir / "model.embed_tokens.weight" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))


# ---- a refused run changes nothing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (["--model.hidden_dim", "64", "--trainer.trackers.wandb", WANDB_OFFLINE], ConfigError),
        (["--trainer.param_dtype", "bfloat16", "--trainer.num_train_steps", "8"], ConfigError),
        (["--data.sources", "{py: {store: /no/such/store}}"], DataError),
    ],
)  # fmt: skip
def test_a_refused_resume_leaves_every_file_in_the_run_directory_as_it_was(
    make_config, finished, monkeypatch, change, error
):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    before = tree(finished)
    with pytest.raises(error):
        train(recorded(make_config, *change), finished)
    assert tree(finished) == before


def test_a_refused_fresh_run_creates_no_run_directory(make_config, tmp_path):
    config = make_config(
        "--trainer.initialize_from",
        f"{{path: {tmp_path / 'empty'}}}",
        "--trainer.trackers.tensorboard",
        "true",
    )
    with pytest.raises(CheckpointError, match="no such run or directory"):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ---- steps rolled back leave the record ------------------------------------------------------------------


def test_steps_rolled_back_from_a_damaged_checkpoint_leave_the_record_and_the_plot(
    make_config, finished, monkeypatch, capsys
):
    metrics = finished / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["step"] <= 4]
    abandoned = [line for line in lines if json.loads(line)["step"] > 4]
    flip_a_byte(finished / "checkpoints" / "step-6")
    plotted, plot = [], trainer_module.plot_loss

    def plot_and_keep(records, *where):
        plotted.append(records)
        return plot(records, *where)

    monkeypatch.setattr(trainer_module, "plot_loss", plot_and_keep)
    capsys.readouterr()

    summary = train(recorded(make_config, "--trainer.plots", "true"), finished)

    err = capsys.readouterr().err
    assert "resuming from" in err and "step-4" in err
    assert steps_of(metrics, "train/loss") == [1, 2, 3, 4, 5, 6]
    assert steps_of(metrics, "eval/loss") == [0, 2, 4, 6]
    assert metrics.read_text().startswith("".join(kept))  # the rows it keeps, byte for byte
    assert (finished / "metrics.superseded.jsonl").read_text() == "".join(abandoned)
    redone = [r for r in read_metrics(metrics) if r["step"] > 4 and "train/loss" in r]
    assert [r["train/loss"] for r in redone] == [json.loads(line)["train/loss"] for line in abandoned[:2]]
    assert plotted == [read_metrics(metrics)]
    assert steps_of(finished / "batches.jsonl") == [0, 1, 2, 3, 4, 5]
    assert tensorboard_steps(finished / "tensorboard", "train/loss") == [1, 2, 3, 4, 5, 6]
    assert re.search(r"metrics.jsonl: 3 rows from step 5 on .* moved to metrics.superseded.jsonl", err), err

    record = read_metrics(metrics)
    assert summary.steps == 6 and summary.tokens == 6 * TOKENS_PER_STEP
    assert summary.start_step == 4 and summary.resumed_from == Location.parse(
        finished / "checkpoints" / "step-4"
    )
    assert summary.session_steps == 2 and summary.session_tokens == 2 * TOKENS_PER_STEP
    assert summary.first_eval == {k: v for k, v in record[0].items() if k.startswith("eval/")}
    assert (summary.first_eval_step, summary.last_eval_step) == (0, 6)
    assert summary.first_eval["eval/loss"] > summary.last_eval["eval/loss"]
    assert summary.session_line().startswith(
        "resumed at step 4: this session trained 2 steps (1,024 tokens, "
    )
    first, last = summary.first_eval["eval/loss"], summary.last_eval["eval/loss"]
    assert summary.held_out_line() == f"held-out loss: {first:.3f} at step 0 -> {last:.3f} at step 6"


@pytest.mark.parametrize("lost", ["the last checkpoint", "every checkpoint"])
def test_rows_logged_after_the_last_checkpoint_by_a_killed_run_leave_the_record(make_config, finished, lost):
    """A SIGKILL after some rows but before the next checkpoint committed (or before the first one), with
    the last row cut short."""
    for step in (6,) if lost == "the last checkpoint" else (2, 4, 6):
        shutil.rmtree(finished / "checkpoints" / f"step-{step}")
    with open(finished / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "train/lo')
    resumed_at = 4 if lost == "the last checkpoint" else 0

    summary = train(recorded(make_config), finished)

    assert steps_of(finished / "metrics.jsonl", "train/loss") == [1, 2, 3, 4, 5, 6]
    assert steps_of(finished / "metrics.jsonl", "eval/loss") == [0, 2, 4, 6]
    assert "train/lo\n" not in (finished / "metrics.jsonl").read_text()
    superseded = (finished / "metrics.superseded.jsonl").read_text()
    assert superseded.endswith('{"step": 6, "train/lo\n')
    assert steps_of(finished / "batches.jsonl") == [0, 1, 2, 3, 4, 5]
    assert tensorboard_steps(finished / "tensorboard", "train/loss") == [1, 2, 3, 4, 5, 6]
    assert summary.start_step == resumed_at and summary.steps == 6


def test_a_rewind_after_a_process_killed_mid_flush_drops_the_rows_it_sets_aside(tmp_path):
    """The five-SIGKILL test's record once kept rows it had set aside (steps 7-9 twice): the killed
    process's half-written `metrics.jsonl.__lock` lent its tail to the rewound log."""
    rows = "".join(json.dumps({"step": s, "train/loss": 1.0}) + "\n" for s in range(1, 10))
    (tmp_path / "metrics.jsonl").write_text(rows)
    (tmp_path / "metrics.jsonl.__lock").write_text(rows)  # the flush of step 9, killed before its rename
    rewound = rewind_record(Directory(tmp_path), "metrics.jsonl", 7)
    assert rewound.steps == [7, 8, 9]
    assert [r["step"] for r in read_metrics(Location.parse(tmp_path) / "metrics.jsonl")] == list(range(1, 7))


def test_a_checkpoint_is_saved_only_after_the_record_reaches_its_step(make_config, run_dir, monkeypatch):
    """Metrics are reported a step behind; a checkpoint whose step the record lacks would leave, after a kill,
    a resumed run with a hole in its record."""
    seen = []
    save = trainer_module.Checkpointer.save

    def save_and_look(checkpointer, state, **kwargs):
        seen.append((int(state.step), steps_of(run_dir / "metrics.jsonl", "train/loss")[-1]))
        return save(checkpointer, state, **kwargs)

    monkeypatch.setattr(trainer_module.Checkpointer, "save", save_and_look)
    config = make_config("--trainer.num_train_steps", "5", "--trainer.checkpoint_every", "2",
                         "--trainer.log_every", "1")  # fmt: skip
    train(config, run_dir)
    assert seen == [(2, 2), (4, 4), (5, 5)]


# ---- the summary and evaluation at step 0 ----------------------------------------------------------------


def test_a_fresh_run_with_eval_every_0_evaluates_at_step_0_and_at_the_end_as_its_help_says(
    make_config, run_dir
):
    description = next(row[3] for row in describe_fields() if row[0] == "trainer.eval_every")
    assert "step 0" in description and "end" in description, description
    summary = train(make_config("--trainer.num_train_steps", "4", "--trainer.eval_every", "0"), run_dir)
    assert steps_of(run_dir / "metrics.jsonl", "eval/loss") == [0, 4]
    assert summary.steps == summary.session_steps == 4 and summary.start_step == 0
    assert summary.tokens == summary.session_tokens == 4 * TOKENS_PER_STEP
    assert (summary.first_eval_step, summary.last_eval_step) == (0, 4) and summary.resumed_from is None
    assert re.fullmatch(r"trained 4 steps \(2,048 tokens, [\d,]+ tokens/s\)", summary.session_line())


def test_the_command_line_summary_of_a_resumed_run_speaks_of_the_run_and_of_this_session(
    make_config, finished, tmp_path
):
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        dump_config(recorded(make_config, "--trainer.num_train_steps", "8", "--optimizer.extension", "decay"))
    )
    env = fake_devices_environ(1)
    command = [
        sys.executable,
        "-m",
        "meltemi.trainer",
        "--config",
        str(config_path),
        "--run-dir",
        str(finished),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    first = read_metrics(finished / "metrics.jsonl")[0]["eval/loss"]
    out = result.stdout
    whole = f"steps: 8   tokens: {8 * TOKENS_PER_STEP:,} in all\n"  # the run, then this session
    assert whole + "resumed at step 6: this session trained 2 steps (1,024 tokens, " in out, out
    assert f"held-out loss: {first:.3f} at step 0 -> " in out and " at step 8" in out, out
    # make_config's trainer.plots false: nothing drawn, so no plot named
    assert "loss curve" not in out and not (finished / "loss.png").exists(), out


# ---- structure -------------------------------------------------------------------------------------------


def test_no_module_of_the_trainer_imports_itself_back():
    root = Path(trainer_module.__file__).parent
    names = {
        ".".join(("meltemi.trainer", *p.relative_to(root).with_suffix("").parts)): p
        for p in root.rglob("*.py")
        if p.name != "__init__.py"
    }
    imports: dict[str, set[str]] = {}
    for name, path in names.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):  # TYPE_CHECKING imports count too
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        imports[name] = found & set(names) - {name}

    def reached(name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            for other in imports[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        return seen

    assert [name for name in names if name in reached(name)] == []


@pytest.mark.parametrize(
    ("sources", "chat_sources", "line"),
    [
        (("text",), (), "held-out loss: 4.600 at step 0 -> 3.000 at step 60"),
        (("chat",), ("chat",), "held-out assistant loss: 4.600 at step 0 -> 3.000 at step 60"),
        (("chat", "text"), ("chat",), "held-out loss: 4.600 at step 0 -> 3.000 at step 60 (chat, assistant "
                                      "tokens: 7.200 -> 2.000; text: 4.200 -> 4.000)"),
        (("chat", "more"), ("chat", "more"), "held-out assistant loss: 4.600 at step 0 -> 3.000 at step 60 "
                                             "(chat: 7.200 -> 2.000; more: 1.000 -> 0.500)"),
        (("text", "gone"), (), "held-out loss: 4.600 at step 0 -> 3.000 at step 60 (text: 4.200 -> 4.000)"),
    ],
)  # fmt: skip
def test_the_held_out_line_says_each_sources_loss_and_calls_it_the_assistants_only_when_it_is(
    sources, chat_sources, line
):
    """A run mixing pretraining text into fine-tuning (as Marin's retrospective proposes) evaluates both:
    its overall loss is not an assistant's, and each source's is shown (a source without figures, left)."""
    from meltemi.trainer.trainer import RunSummary

    first = {"eval/loss": 4.6, "eval/chat/loss": 7.2, "eval/text/loss": 4.2, "eval/more/loss": 1.0}
    last = {"eval/loss": 3.0, "eval/chat/loss": 2.0, "eval/text/loss": 4.0, "eval/more/loss": 0.5}
    unused = dict.fromkeys(
        ["run_dir", "steps", "tokens", "skipped_steps", "tokens_per_second", "metrics_path", "plot_path",
         "last_checkpoint", "stopped_by", "checkpoint_seconds_blocked", "start_step", "resumed_from",
         "session_steps", "session_tokens"]
    )  # fmt: skip
    summary = RunSummary(**unused, first_eval=first, last_eval=last, first_eval_step=0, last_eval_step=60,
                         sources=sources, chat_sources=chat_sources)  # fmt: skip
    assert summary.held_out_line() == line
