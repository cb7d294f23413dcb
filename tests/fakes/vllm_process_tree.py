"""A stand-in for one replica's vLLM server process group, for the hang and slow faults' tests.

``python vllm_process_tree.py server PORT METRICS_FILE`` is the "API server": it answers
``/health`` with 200 and ``/metrics`` with the file's text (read anew each time) on
127.0.0.1:PORT, lists one model at ``/v1/models``, and streams ``/v1/completions`` one SSE
chunk per token, each token costing a fixed amount of CPU work in the server itself (so a
CPU quota or a SIGSTOP duty cycle on it slows its tokens/s as it would a real engine's). It
starts an "EngineCore" child, which starts a "worker", and a "helper"
child (as multiprocessing's resource tracker sits beside vLLM's engine). The EngineCore
carries ``VLLM::EngineCore`` in its command line, where vLLM's process title puts it, so
:func:`faults.vllm.engine.find_engine_core` finds it as it finds the real one. Every process
stays in the server's process group and exits by itself after a minute at most, so a test
that dies leaves nothing behind for long.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ENGINE_TITLE = "VLLM::EngineCore"
LIFETIME_S = 60.0
MODEL = "fake-model"
# CPU work per generated token: about 2-3 ms of one core here, so 32 tokens take ~0.1 s at full
# speed and a tenth of the CPU makes them take ~1 s.
TOKEN_WORK = 150_000


def _generate_token() -> None:
    sum(range(TOKEN_WORK))


def _child(role: str) -> None:
    # Nobody waits on the children: the tests end them by pid.
    subprocess.Popen([sys.executable, __file__, role])


def _serve(port: int, metrics: Path) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                body = b""
            elif self.path == "/metrics":
                body = metrics.read_bytes()
            elif self.path == "/v1/models":
                body = json.dumps({"data": [{"id": MODEL, "max_model_len": 2048}]}).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self.send_error(404)
                return
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            # HTTP/1.0: the stream ends when the connection closes, as an SSE client reads it.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for _ in range(int(request.get("max_tokens", 16))):
                _generate_token()
                chunk = {"choices": [{"index": 0, "text": " tok"}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    """Play the role named by the first argument, then exit after LIFETIME_S."""
    role = sys.argv[1]
    if role == "server":
        _serve(int(sys.argv[2]), Path(sys.argv[3]))
        _child(ENGINE_TITLE)
        _child("helper")
    elif role == ENGINE_TITLE:
        _child("worker")
    time.sleep(LIFETIME_S)


if __name__ == "__main__":
    main()
