"""popaudit: audit trained recommender models for popularity bias in embedding norms."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("popaudit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
