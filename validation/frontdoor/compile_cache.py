"""JAX's persistent compilation cache for the command line and the front door.

Most of a first fit's time on small data is XLA compilation (a 50 x 40 toy fit: 18.8 s the
first time, 0.1 s for the same shapes again in one process). JAX can keep compiled programs on
disk between processes; `enable` turns that on in the user's cache folder, so the second
``factorbayes fit`` / ``recommend`` / ``evaluate`` of the same shapes skips compilation.

Where: ``$FACTORBAYES_JAX_CACHE`` if set (``off``, ``0`` or ``none`` switch the cache off), else
``$XDG_CACHE_HOME/factorbayes/jax`` (default ``~/.cache/factorbayes/jax``). A cache directory
the user (or the test suite) already configured for JAX (``JAX_COMPILATION_CACHE_DIR`` or
``jax.config.jax_compilation_cache_dir``) is left as it is. Programs that compile in under
0.5 s are not written (JAX's ``jax_persistent_cache_min_compile_time_secs``); JAX keys every
entry on the program, the backend and the XLA flags, so a cache never serves a program compiled
for another instruction set or device. Delete the folder to empty it.

Source: project addition (issue 24).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["OFF_VALUES", "cache_dir", "enable"]

OFF_VALUES = ("off", "0", "none", "false", "")


def cache_dir(environ=None) -> Path | None:
    """The folder `enable` would use, or None when the cache is switched off.

    Parameters
    ----------
    environ : mapping str -> str, optional
        The environment variables to read (default ``os.environ``): ``FACTORBAYES_JAX_CACHE``,
        ``XDG_CACHE_HOME``.

    Returns
    -------
    pathlib.Path or None
        The folder (not created here), or None when ``FACTORBAYES_JAX_CACHE`` is one of `OFF_VALUES`
        (case and surrounding spaces ignored).

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    env = os.environ if environ is None else environ
    chosen = env.get("FACTORBAYES_JAX_CACHE")
    if chosen is not None:
        return None if chosen.strip().lower() in OFF_VALUES else Path(chosen).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "factorbayes" / "jax"


def enable(environ=None) -> Path | None:
    """Turn on JAX's persistent compilation cache in `cache_dir` (see the module docstring).

    Call it before the first compilation (the CLI calls it at start-up). Sets JAX's
    ``jax_compilation_cache_dir`` and ``jax_persistent_cache_min_compile_time_secs`` (0.5 s).

    Parameters
    ----------
    environ : mapping str -> str, optional
        Passed to `cache_dir` (default ``os.environ``). A cache folder already configured for JAX is
        read from ``jax.config`` or the process's ``JAX_COMPILATION_CACHE_DIR``, not from ``environ``.

    Returns
    -------
    pathlib.Path or None
        The folder in use (the one already configured, if any), or None when switched off or when the
        folder cannot be created.

    Raises
    ------
    None of its own (a folder that cannot be created leaves the cache off: compilation still works,
    only slower).

    Source: project addition.
    """
    import jax

    configured = jax.config.jax_compilation_cache_dir or os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if configured:
        return Path(configured)
    folder = cache_dir(environ)
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    return folder
