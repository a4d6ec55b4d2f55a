"""A pool of OpenAI-compatible servers behind one client: least outstanding requests first, a
server that fails to connect (or drops a connection) taken out and tried again later.

The response cache is keyed by model, messages and sampling only (:mod:`gpurag.llm.cache`),
never by server, so any server's answer serves every later request, whichever server it
would have gone to; an extraction shard can move between servers and machines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpurag.errors import ConfigError

RETRY_AFTER_S = 2.0  # a server taken out is tried again after this, doubling per failure
MAX_RETRY_AFTER_S = 60.0


def split_urls(spec: str, normalize: Callable[[str], str]) -> list[str]:
    """The URLs of ``spec``: one URL, several separated by commas or spaces, or ``@FILE`` /
    the path of a file holding one URL a line (``#`` starts a comment)."""
    spec = spec.strip()
    path = Path(spec[1:] if spec.startswith("@") else spec)
    if spec.startswith("@") or (not spec.startswith(("http://", "https://"))
                                and "," not in spec and path.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"LLM URL file {path}: cannot read it "
                              f"({exc.strerror or exc})") from None
        items = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        urls = [u for u in items if u]
        if not urls:
            raise ConfigError(f"LLM URL file {path}: no URL in it")
    else:
        urls = [u for u in spec.replace(",", " ").split() if u]
    if not urls:
        raise ConfigError("LLM URL: empty")
    out: list[str] = []
    for url in map(normalize, urls):
        if url not in out:
            out.append(url)
    return out


@dataclass
class Server:
    """One server of the pool and what the client knows of it."""

    url: str
    outstanding: int = 0
    answered: int = 0
    failures: int = 0  # consecutive; reset by an answer
    taken_out: int = 0  # times taken out of the pool
    down_until: float = 0.0

    def up(self, now: float) -> bool:
        return self.down_until <= now


class ServerPool:
    """Picks a server per request: among those up, the one with the fewest requests in flight
    (ties: the one used least recently picked, so an idle pool spreads evenly)."""

    def __init__(self, urls: list[str], clock: Callable[[], float] = time.monotonic) -> None:
        if not urls:
            raise ConfigError("an LLM server pool needs at least one URL")
        self.servers = [Server(u) for u in urls]
        self._clock = clock
        self._turn = 0

    def __len__(self) -> int:
        return len(self.servers)

    def pick(self) -> Server:
        """The server for the next request (its ``outstanding`` counted); a server whose
        time out is over is tried again, and with every server out, the one due first."""
        now = self._clock()
        n = len(self.servers)
        order = [self.servers[(self._turn + k) % n] for k in range(n)]
        up = [s for s in order if s.up(now)]
        if up:
            best = min(up, key=lambda s: s.outstanding)
        else:
            best = min(order, key=lambda s: s.down_until)
        self._turn = (self.servers.index(best) + 1) % n
        best.outstanding += 1
        return best

    def release(self, server: Server) -> None:
        server.outstanding -= 1

    def answered(self, server: Server) -> None:
        server.answered += 1
        server.failures = 0

    def take_out(self, server: Server) -> bool:
        """``server`` failed to connect or dropped a connection: out until its retry time
        (which doubles with each failure in a row); False if it was out already (the other
        requests it had in flight failing too)."""
        if not server.up(self._clock()):
            return False
        server.failures += 1
        server.taken_out += 1
        wait = min(MAX_RETRY_AFTER_S, RETRY_AFTER_S * 2 ** (server.failures - 1))
        server.down_until = self._clock() + wait
        return True

    def any_up(self) -> bool:
        now = self._clock()
        return any(s.up(now) for s in self.servers)

    def stats(self) -> list[dict[str, object]]:
        return [{"url": s.url, "answered": s.answered, "taken_out": s.taken_out,
                 "up": s.up(self._clock())} for s in self.servers]
