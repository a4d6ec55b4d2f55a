"""A small Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (file descriptors
3 and 4, NUL-terminated JSON): enough to open a page, type into it and read its DOM, with no
WebSocket library."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from typing import Any

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)


class Browser:
    """Headless Chromium driven over a pipe; every wait is bounded."""

    def __init__(self, profile: str) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
        # Chromium reads commands on fd 3 and writes replies on fd 4.
        shell = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.proc = subprocess.Popen(["bash", "-c", shell, *args],
                                     pass_fds=(to_chrome_r, from_chrome_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.session: str | None = None

    def send(self, method: str, params: dict | None = None, timeout: float = 60,
             session: bool = True) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _next(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            # poll, not select: select() refuses descriptors >= 1024, which a long test
            # process reaches (each opened index holds its files until it is collected)
            poller = select.poll()
            poller.register(self._from_chrome, select.POLLIN)
            if left <= 0 or not poller.poll(left * 1000):
                raise TimeoutError("no reply from Chromium")
            data = os.read(self._from_chrome, 1 << 16)
            if not data:
                raise RuntimeError("Chromium closed the pipe")
            self._buf += data
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def open(self, url: str) -> None:
        """A new tab at ``url``; later commands go to it."""
        target = self.send("Target.createTarget", {"url": url}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target,
                                                           "flatten": True},
                                 session=False)["sessionId"]

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120) -> Any:
        """The value of ``expression`` once it is truthy (polled, bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"page never satisfied: {expression}")

    def type_text(self, text: str) -> None:
        """Type ``text`` into the focused element, as keyboard input."""
        self.send("Input.insertText", {"text": text})

    def press_enter(self) -> None:
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", {
                "type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13,
                "nativeVirtualKeyCode": 13, **({"text": "\r"} if kind == "keyDown" else {})})

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.send("Browser.close", session=False, timeout=10)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
