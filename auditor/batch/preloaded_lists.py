"""Imported by the forkserver of a batch whose rows audit served lists alone, and by
nothing else: :data:`~auditor.batch.preload.LIST_WORKER_MODULES` (no torch), imported and
frozen as :mod:`auditor.batch.preloaded` does."""

from __future__ import annotations

from auditor.batch.preload import LIST_WORKER_MODULES, import_frozen

import_frozen(LIST_WORKER_MODULES)
