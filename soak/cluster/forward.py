"""A TCP forwarder in the root namespace: the simulated hosts reach the store's server through it.

The reference servers listen on the root namespace's loopback, which no other namespace can reach. The forwarder
listens on the bridge's address (one port per upstream) and relays bytes both ways, nothing else: faults are made
elsewhere (a partition is a packet filter inside the host's namespace, `soak.cluster.faults`), so what the store
sees is what a real remote client would send. Run as its own process (`python -m soak.cluster.forward LISTEN
HOST PORT`): it prints its port on one line, then serves until killed.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from contextlib import suppress

__all__ = ["Forwarder", "main"]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with suppress(Exception):
            writer.close()


async def _serve(listen: str, host: str, port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, listen, 0, backlog=256)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    listen, host, port = (argv if argv is not None else sys.argv[1:])[:3]
    asyncio.run(_serve(listen, host, int(port)))


class Forwarder:
    """The forwarder process for one upstream `(host, port)`, listening on `listen`."""

    def __init__(self, listen: str, upstream: tuple[str, int]) -> None:
        self.listen = listen
        self.proc = subprocess.Popen([sys.executable, "-m", "soak.cluster.forward", listen, upstream[0],
                                      str(upstream[1])], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.close()
            raise OSError(f"the store forwarder on {listen} did not start")
        self.port = int(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


if __name__ == "__main__":
    main()
