"""Imported by the forkserver of a batch's local workers, and by nothing else: the modules
a worker needs (:data:`~auditor.batch.preload.WORKER_MODULES`; served lists alone:
:mod:`auditor.batch.preloaded_lists`), imported with the cyclic garbage collector paused,
then frozen (:func:`~auditor.batch.preload.import_frozen`).

Importing torch and the audit stack builds some 300,000 objects that live as long as every
worker. The collector would walk them while they are imported (about 0.1 s of the
server's start, which every first row waits for), and again in each full collection of
every worker, writing to the memory the workers share with the server (so each worker
copies those pages). ``gc.freeze`` keeps them out of all later collections, in the server
and in every worker forked from it, as CPython's documentation advises for servers that
fork. (``check`` does the same around its own imports: ``auditor/cli/_startup.py``.)
"""

from __future__ import annotations

from auditor.batch.preload import WORKER_MODULES, import_frozen

import_frozen(WORKER_MODULES)
