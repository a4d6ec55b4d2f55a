"""Keep-alive requests paid ~43 ms each (Nagle against the client's delayed ACK): the
listening socket did not name TCP, so asyncio left Nagle on for every accepted connection."""

from __future__ import annotations

import asyncio
import socket

from gpurag.serve.cli import listen_socket


def test_accepted_connections_have_nagle_off():
    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    seen: list[int] = []

    class Record(asyncio.Protocol):
        def connection_made(self, transport):  # the transport asyncio made for the request
            raw = transport.get_extra_info("socket")
            seen.append(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def main():
        server = await asyncio.get_running_loop().create_server(Record, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(main())
    assert seen and seen[0] != 0
