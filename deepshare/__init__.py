"""DeepShare: network-contention-aware scheduling of distributed deep-learning jobs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("deepshare")
except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
    __version__ = "0+unknown"
