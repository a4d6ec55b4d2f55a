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
