"""``gpurag llm serve`` and the server helpers, with a stand-in ``vllm`` executable (vLLM
itself needs a GPU). The stand-in records its arguments and answers ``/health``."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpurag.llm.server import (
    ServerError,
    ServerProcess,
    free_port,
    llama_cpp_command,
    probe,
    vllm_command,
)

STUB = textwrap.dedent("""\
    import json, os, signal, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    with open(os.environ["STUB_RECORD"], "w") as f:
        json.dump({"argv": args, "api_key": os.environ.get("VLLM_API_KEY")}, f)

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), H)
    def bye(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, bye)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
""")


def test_vllm_command_has_batch_extraction_flags():
    cmd = vllm_command("Qwen/Qwen2.5-7B-Instruct", port=8123, max_num_seqs=512,
                       served_model_name="qwen", extra_args=["--dtype", "half"])
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    joined = " ".join(cmd)
    for flag in ("--enable-prefix-caching", "--max-num-seqs 512", "--port 8123",
                 "--gpu-memory-utilization 0.85", "--max-model-len 8192",
                 "--served-model-name qwen", "--dtype half"):
        assert flag in joined
    assert "--enable-prefix-caching" not in vllm_command("m", enable_prefix_caching=False)
    assert llama_cpp_command("x.gguf", port=1)[1:3] == ["-m", "llama_cpp.server"]


def test_start_fails_when_the_server_exits(tmp_path):
    proc = ServerProcess([sys.executable, "-c", "import sys; sys.exit(3)"],
                         f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ServerError, match="code 3"):
        proc.start(timeout_s=20)
    with pytest.raises(ServerError, match="not found"):
        ServerProcess(["no-such-binary-xyz"], "http://127.0.0.1:1").start()


def test_cli_serve_starts_prints_url_and_stops_cleanly(tmp_path):
    stub = tmp_path / "vllm"
    stub.write_text(f"#!{sys.executable}\n" + STUB)
    stub.chmod(0o755)
    record = tmp_path / "record.json"
    port = free_port()
    env = {**os.environ, "STUB_RECORD": str(record), "OPENAI_API_KEY": "sekrit",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpurag", "llm", "serve", "--model", "org/model-7b",
         "--port", str(port), "--vllm-bin", str(stub), "--max-num-seqs", "300",
         "--vllm-arg=--dtype=half"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"LLM server ready: http://127.0.0.1:{port}/v1", proc.stderr.read()
        assert probe(f"http://127.0.0.1:{port}")
        recorded = json.loads(record.read_text())
        argv = recorded["argv"]
        assert argv[:2] == ["serve", "org/model-7b"]
        assert "--enable-prefix-caching" in argv and "--dtype=half" in argv
        assert argv[argv.index("--max-num-seqs") + 1] == "300"
        assert recorded["api_key"] == "sekrit" and "sekrit" not in argv
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "LLM server stopped" in out
    assert not probe(f"http://127.0.0.1:{port}", timeout_s=0.5)


def test_cli_serve_runs_the_vllm_named_by_gpurag_vllm_bin(tmp_path):
    """Without ``--vllm-bin``, ``gpurag llm serve`` starts ``$GPURAG_VLLM_BIN`` (README)."""
    stub = tmp_path / "my-vllm"
    stub.write_text(f"#!{sys.executable}\n"
                    "import json, os, sys\n"
                    "json.dump(sys.argv[1:], open(os.environ['STUB_RECORD'], 'w'))\n"
                    "sys.exit(3)\n")
    stub.chmod(0o755)
    record = tmp_path / "record.json"
    env = {**os.environ, "STUB_RECORD": str(record), "GPURAG_VLLM_BIN": str(stub),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "gpurag", "llm", "serve", "--model", "org/model-7b",
         "--port", str(free_port()), "--wait", "20"],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert "code 3" in done.stderr, done.stderr
    assert json.loads(record.read_text())[:2] == ["serve", "org/model-7b"]
