"""Exceptions with messages meant for users."""


class GpuragError(Exception):
    """Base class of gpurag's own errors."""


class ConfigError(GpuragError):
    """A setting, path or requested backend is not usable."""


class IndexFormatError(GpuragError):
    """An index directory is missing, corrupt, or of another format version."""


class InputError(GpuragError):
    """Input documents could not be read at all."""


class IndexBusyError(GpuragError):
    """Another process is writing the same index path."""


class WriteError(GpuragError):
    """A file could not be written completely (full disk, read-only or unwritable path)."""


def describe_os_error(exc: OSError) -> str:
    """One line for an operating-system error that reached the command line: what failed, on
    which path, and for a full disk how much space is free there."""
    import errno
    import os

    from gpurag.store.diskio import free_bytes

    path = os.fsdecode(exc.filename) if exc.filename is not None else None
    reason = exc.strerror or " ".join(str(exc).split())
    if exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc):
        where = f" writing {path}" if path else ""
        free = free_bytes(path) if path else None
        room = f" ({free / 2**20:.1f} MiB free there)" if free is not None else ""
        return (f"no space left on the device{where}{room}: free some space and run the "
                "command again (a build resumes where it stopped; a commit needs room for the "
                "old and the new version side by side)")
    if path:
        return f"cannot write or read {path}: {reason}"
    return reason
