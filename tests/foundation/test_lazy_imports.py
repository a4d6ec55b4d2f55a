"""The command line starts without loading what its command does not use."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_line_does_not_load_agent_memory_until_a_memory_command_runs():
    code = ("import sys, gpurag.cli; print('gpurag.memory.memory' in sys.modules); "
            "from gpurag.memory import Memory, MemoryConfig; "
            "print(Memory.__module__, MemoryConfig.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == "False"
    assert out[1] == "gpurag.memory.memory gpurag.memory.config"


def test_an_unknown_memory_name_is_an_attribute_error():
    import gpurag.memory

    try:
        gpurag.memory.Nope  # noqa: B018
    except AttributeError as exc:
        assert "Nope" in str(exc)
    else:
        raise AssertionError("gpurag.memory.Nope resolved")
