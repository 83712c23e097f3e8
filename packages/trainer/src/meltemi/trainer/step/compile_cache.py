"""JAX's persistent compilation cache, on by default, so a restart, a resume or a second dry run loads its
compiled programs from disk instead of compiling them again.

Where it lives is a decision with a reason (``CacheChoice``): ``trainer.compile_cache_dir`` when the config
names one, else ``$JAX_COMPILATION_CACHE_DIR`` when a user or a test sets it, else ``meltemi/jax`` under the
user's cache directory (``$XDG_CACHE_HOME``, or ``~/.cache``). ``trainer.compile_cache: false`` (the
command line's ``--no-compile-cache``) turns it off. Every program that takes any time to compile is kept,
so the train step, the eval step and the sampler are all cached; the directory is capped in size (least
recently used entries go first), which also makes JAX lock it, so processes that share it never read an
entry another one is still writing.

>>> choice = choose_cache({"XDG_CACHE_HOME": "/home/me/.cache"})
>>> choice.directory, choice.reason
('/home/me/.cache/meltemi/jax', 'the default under $XDG_CACHE_HOME')
>>> choose_cache({"JAX_COMPILATION_CACHE_DIR": "/tmp/jax"}).reason
'$JAX_COMPILATION_CACHE_DIR'
>>> choose_cache({}, enabled=False).directory is None
True
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from meltemi.trainer.config import TrainerConfig

ENV_DIRECTORY = "JAX_COMPILATION_CACHE_DIR"
# Seconds of compilation below which a program is not worth a file: the tiny programs JAX builds for single
# array operations. The train, eval and sampling steps of even the smallest model take longer than this.
MIN_COMPILE_SECONDS = 0.05
MAX_BYTES = 8 * 2**30  # least recently used entries are removed past this size

_HITS = "/jax/compilation_cache/cache_hits"
_MISSES = "/jax/compilation_cache/cache_misses"
_SAVED = "/jax/compilation_cache/compile_time_saved_sec"


@dataclasses.dataclass(frozen=True)
class CacheChoice:
    """Where compiled programs are kept (``None``: nowhere), and why there."""

    directory: str | None
    reason: str

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def describe(self) -> str:
        if self.directory is None:
            return f"compilation cache off ({self.reason})"
        return f"compilation cache {self.directory} ({self.reason})"


def choose_cache(
    environ: Mapping[str, str] | None = None, *, directory: str | None = None, enabled: bool = True
) -> CacheChoice:
    """Where the compilation cache goes for a config's ``compile_cache_dir`` (``directory``) and
    ``compile_cache`` (``enabled``), in this environment (default: the process's)."""
    environ = os.environ if environ is None else environ
    if not enabled:
        return CacheChoice(None, "trainer.compile_cache: false")
    if directory:
        return CacheChoice(directory, "trainer.compile_cache_dir")
    if environ.get(ENV_DIRECTORY):
        return CacheChoice(environ[ENV_DIRECTORY], f"${ENV_DIRECTORY}")
    if environ.get("XDG_CACHE_HOME"):
        directory = os.path.join(environ["XDG_CACHE_HOME"], "meltemi", "jax")
        return CacheChoice(directory, "the default under $XDG_CACHE_HOME")
    home = os.path.join(os.path.expanduser("~"), ".cache")
    return CacheChoice(os.path.join(home, "meltemi", "jax"), "the default under ~/.cache")


def enable(choice: CacheChoice) -> CacheChoice:
    """Point JAX's persistent cache at ``choice`` (or switch it off) for every later compilation.

    Thresholds a user set in the environment (``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``,
    ``JAX_COMPILATION_CACHE_MAX_SIZE``) are kept.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    from meltemi.datastore.errors import StorageError
    from meltemi.datastore.storage import local_path_of

    try:  # a URL missing a slash (gs:/bucket) is refused, not made a local directory named gs:
        local = None if choice.directory is None else local_path_of(choice.directory)
    except StorageError as e:
        choice, local = CacheChoice(None, f"{choice.reason}: {e}"), None
    if local is not None:
        try:
            os.makedirs(choice.directory, exist_ok=True)
        except OSError as e:
            choice = CacheChoice(None, f"cannot create {choice.directory}: {e.strerror}")
    if choice.directory is None:
        jax.config.update("jax_enable_compilation_cache", False)
    else:
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_compilation_cache_dir", choice.directory)
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
        if "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ:
            jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    compilation_cache.reset_cache()  # the next compilation reads the settings above, whatever ran before
    return choice


def portable_keys() -> None:
    """Make the cache's keys the same wherever the cache lies, so that its entries can move between hosts
    (``cache_mirror``): JAX otherwise turns on XLA's GPU autotuning cache inside the cache directory, and
    that directory's path, written into every program's compile options, becomes part of every key (two
    hosts with another HOME would never share a program)."""
    import jax

    jax.config.update("jax_persistent_cache_enable_xla_caches", "none")


def enable_for(trainer: TrainerConfig) -> CacheChoice:
    """``enable`` the cache a config's ``trainer.compile_cache`` and ``trainer.compile_cache_dir`` ask for.

    Every process of a multi-process run uses it too: one may then load a program that another compiles,
    and reach the program's first collective long after; ``distributed.connect_collectives`` and the
    trainer's wait after each compilation keep that from ending the run.
    """
    return enable(choose_cache(directory=trainer.compile_cache_dir, enabled=trainer.compile_cache))


@dataclasses.dataclass
class CacheCounter:
    """The persistent cache's hits and misses, and the compile seconds the hits saved, while in a ``with``.

    >>> with CacheCounter() as counter:
    ...     pass
    >>> counter.hits, counter.misses
    (0, 0)
    """

    hits: int = 0
    misses: int = 0
    saved_seconds: float = 0.0

    def _event(self, event: str, **_) -> None:
        if event == _HITS:
            self.hits += 1
        elif event == _MISSES:
            self.misses += 1

    def _duration(self, event: str, seconds: float, **_) -> None:
        if event == _SAVED:
            self.saved_seconds += max(seconds, 0.0)

    def __enter__(self) -> CacheCounter:
        import jax.monitoring

        jax.monitoring.register_event_listener(self._event)
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        return self

    def __exit__(self, *exc) -> None:
        import jax.monitoring

        jax.monitoring.unregister_event_listener(self._event)
        jax.monitoring.unregister_event_duration_listener(self._duration)

    def describe(self) -> str:
        """One phrase for the startup line: what the cache did for this process so far."""
        if not self.hits and not self.misses:
            return "no cached compilation"
        if self.hits:
            return f"reused {self.hits} cached program(s), {self.saved_seconds:.1f} s of compilation saved"
        return f"cached {self.misses} new program(s)"
