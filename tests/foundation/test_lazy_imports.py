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


def test_the_command_line_does_not_load_the_http_client_until_a_model_is_asked():
    """httpx (which also loads rich, click and pygments) costs every ``gpurag`` process about
    an eighth of its start-up; only the commands that talk to a model need it."""
    code = ("import sys, gpurag.cli; print(sorted({'httpx', 'rich', 'json_repair'} & "
            "set(sys.modules))); import gpurag.llm as llm; "
            "print(llm.LLMClient.__module__, llm.LLMConfig.__module__, llm.parse_json.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "gpurag.llm.client gpurag.llm.config gpurag.llm.jsonrepair"


def test_an_unknown_llm_name_is_an_attribute_error():
    import gpurag.llm

    try:
        gpurag.llm.Nope  # noqa: B018
    except AttributeError as exc:
        assert "Nope" in str(exc)
    else:
        raise AssertionError("gpurag.llm.Nope resolved")


def test_the_insert_path_loads_neither_scipys_graph_algorithms_nor_the_delete_module():
    """A local insert resolves names (connected components) but needs neither
    ``scipy.sparse.csgraph`` (it loads ``scipy.sparse.linalg`` and ``scipy.linalg``: about a
    third of a second of every insert process) nor the local delete."""
    code = ("import sys, numpy as np; import gpurag.pipeline.updates; "
            "import gpurag.pipeline.incremental_local; import gpurag.resolve.aliases; "
            "from gpurag.resolve.groups import components; "
            "print(components(4, np.array([0, 2]), np.array([1, 3])).tolist()); "
            "print(sorted({'scipy.sparse.csgraph', 'scipy.sparse.linalg', "
            "'gpurag.pipeline.incremental_delete'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == "[0, 0, 1, 1]"
    assert out[1] == "[]"
