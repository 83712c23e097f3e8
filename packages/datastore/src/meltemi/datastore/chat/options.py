"""The choices a chat store is built with, named once for the build's request and the chat build alike.

>>> LOSS_ON, OVERLONG, SHIPPED_TEMPLATE
(('assistant', 'all'), ('truncate', 'drop'), 'llama3')
"""

from typing import Literal, get_args

SHIPPED_TEMPLATE = "llama3"  # the chat template this package ships (templates/llama3.jinja)
LossOn = Literal["assistant", "all"]
Overlong = Literal["truncate", "drop"]
LOSS_ON: tuple[str, ...] = get_args(LossOn)
OVERLONG: tuple[str, ...] = get_args(Overlong)
