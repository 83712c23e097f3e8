"""Talk with a chat model trained by apps/sft.py; only the assistant's reply goes to stdout.

    uv run apps/chat.py --checkpoint runs/tiny_sft --message "Describe json.dumps" [--temperature 0]
    uv run apps/chat.py --checkpoint runs/tiny_sft [--system TEXT]      # a prompt loop: one reply per line

``--checkpoint`` is a run directory (its latest good checkpoint) or a ``step-N`` directory, local or in a
bucket (``s3://``, ``gs://``). The conversation is rendered by the chat template the checkpoint records (as
``transformers``' ``apply_chat_template`` renders it with the exported tokenizer) and the reply stops at the
end of the assistant's turn. Without ``--message`` each line read from stdin is a user message, answered in
the same conversation, until end of input.
"""

from __future__ import annotations

import argparse
import sys

from meltemi.trainer.generate.flags import add_checkpoint_flag, add_sampling_flags, sampling_settings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_checkpoint_flag(parser)
    parser.add_argument("--message", default=None, help="the user's message (default: one per line of stdin)")
    parser.add_argument(
        "--system", default=None, help="a system message opening the conversation (default: none)"
    )
    add_sampling_flags(parser, max_new_tokens=256, temperature=0.0)
    args = parser.parse_args(argv)

    from meltemi.datastore import DatastoreError
    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.generate.chat import ChatSession
    from meltemi.trainer.generate.sampling import SamplingConfig

    try:
        settings = SamplingConfig(*sampling_settings(args))
        session = ChatSession.of_checkpoint(
            args.checkpoint, settings, system=args.system, warn=lambda m: print(m, file=sys.stderr)
        )
        messages = [args.message] if args.message is not None else (line.rstrip("\n") for line in sys.stdin)
        for message in messages:
            print(session.say(message), flush=True)
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    from meltemi.trainer.cli import exit_process

    exit_process(main(sys.argv[1:]))
