"""`streamlit run app.py`, with Streamlit told up front that app.py defines its pages itself,
and with Nagle's algorithm off on the server's connections.

Why the pages: a folder named `pages/` next to app.py makes Streamlit treat the very first
request after the server starts as an old-style pages-folder app, so a deep link such as
/concurrency?... opened first shows a "Page not found" dialog before st.navigation takes over
(every later session is fine). Declaring the pages up front removes that.

Why TCP_NODELAY: Streamlit binds its listening socket with protocol 0, so asyncio does not set
TCP_NODELAY on the accepted connections (it only does so for sockets whose proto is
IPPROTO_TCP). Every rerun then sends a large message followed by small ones, and the small ones
wait for the browser's delayed ACK: about 40 ms added to every rerun on Linux (measured by
benchmarks/served.py). The listening socket is rebound as IPPROTO_TCP with TCP_NODELAY, which
accepted connections inherit. Usage (see the Makefile):

    python -m ui.serve [streamlit run options...]
"""
from __future__ import annotations

import os
import socket
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _no_delay_listener(bind):
    def bind_socket(address: str, port: int, backlog: int) -> socket.socket:
        sock = bind(address, port, backlog)
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.proto == socket.IPPROTO_TCP:
            return sock
        tcp = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tcp.set_inheritable(True)
        return tcp

    return bind_socket


def serve(script: str, args: list[str]) -> None:
    """`streamlit run script args...` with the listening socket set up as described above."""
    from streamlit.web import cli

    try:
        from streamlit.web.server.starlette import starlette_server
    except ImportError:  # another Streamlit server: run as it is
        starlette_server = None
    if starlette_server is not None and hasattr(starlette_server, "_bind_socket"):
        starlette_server._bind_socket = _no_delay_listener(starlette_server._bind_socket)
    sys.argv = ["streamlit", "run", script, *args]
    cli.main()


def main(argv: list[str] | None = None) -> None:
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False  # app.py calls st.navigation
    serve(os.path.join(ROOT, "app.py"), sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
