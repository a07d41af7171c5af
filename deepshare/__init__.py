"""DeepShare: network-contention-aware scheduling of distributed deep-learning jobs."""


def __getattr__(name: str) -> str:
    """``__version__`` is read from the installed metadata on first use, not at import:
    ``importlib.metadata`` costs tens of milliseconds that ``deepshare simulate`` never needs."""
    if name != "__version__":
        raise AttributeError(f"module 'deepshare' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("deepshare")
    except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value
