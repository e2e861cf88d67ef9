"""What a counts file (``frequencies``) cannot stand in for: the one remedy every reason quotes.

A counts file gives each item's interactions (and maybe its distinct users), never the
(user, item) pairs of the log, so history queries, probe batches, held-out accuracy, each
user's training items and the log's number of users are unknown with it. Every
``not_measured`` reason that ends there ends with :func:`counts_only`, worded once. Kept
apart from :mod:`auditor.loading.frequencies` (the reader, which imports pyarrow) so that
the measures can quote it without loading the reader.
"""

from __future__ import annotations

from auditor.errors import setting


def counts_only() -> str:
    """Why a counts file cannot give what needs the log, and the remedy, as a clause."""
    return f"{setting('frequencies')} gives counts per item only: pass the log with {setting('interactions')}"


__all__ = ["counts_only"]
