"""The cyclic garbage collector while a command imports its libraries.

Importing torch, pyarrow and popaudit's modules creates millions of objects, none of them
garbage; the collector still walks them, and every full collection during the audit that
follows walks them again. Measured on ``check`` of the 800-item sample: 0.5 s of
collections, 0.3 s of it in three full collections after torch was imported, of a
3.4 s CPU run. So while a command imports, the collector waits, and what the imports
built is then frozen (``gc.freeze``: kept out of later collections, as CPython's docs
suggest for objects that live as long as the process). The price: cyclic garbage the
imports leave behind is frozen with the rest and never freed, about 7,000 objects and
a megabyte for ``check``; collecting it first would cost the full collection saved.

The same holds at exit: the interpreter's shutdown runs full collections over every
object still alive (torch's, numpy's, pyarrow's, the audit's), which the operating system
frees with the process anyway; measured on ``check`` of the sample, 0.12-0.14 s for one
such collection, about 0.07 s of it over what ``import torch`` alone leaves. The
console-script entry point therefore freezes everything once its command is done
(:func:`frozen_at_exit`); atexit handlers and module teardown still run, only the
collector skips what is frozen.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def imports_without_gc() -> Iterator[None]:
    """No cyclic collection inside; on leaving, everything alive is frozen out of later
    collections and the collector runs again as before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@contextmanager
def frozen_for_the_run() -> Iterator[None]:
    """Around one run of a command that uses :func:`imports_without_gc`: what it froze is
    handed back to the collector at the end (``gc.unfreeze``), so that a process running
    many commands (the tests, a notebook calling the CLI) does not keep their garbage."""
    try:
        yield
    finally:
        gc.unfreeze()


def frozen_at_exit() -> None:
    """The process is about to exit (the console-script entry point is done): freeze
    every object alive, so that the collections of the interpreter's shutdown walk none of
    them. Not for a process that goes on (the tests, a notebook): it would keep their
    garbage; :func:`frozen_for_the_run` is for those."""
    gc.freeze()
