"""A static file server on 127.0.0.1, in a thread: what the browser playground test serves
``build/playground/`` with (as ``python -m http.server`` would, with WebAssembly's and
ES modules' MIME types set whatever the machine's ``mime.types`` says)."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["StaticServer"]


class _Handler(SimpleHTTPRequestHandler):
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                      ".mjs": "text/javascript", ".js": "text/javascript", ".json": "application/json",
                      ".whl": "application/octet-stream"}

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        self.server.requests.append(self.path)  # type: ignore[attr-defined]


class StaticServer:
    """Serves ``folder`` on ``http://127.0.0.1:<port>/`` until :meth:`stop` (or the ``with`` ends).

    Attributes:
        url: the base URL, ending in ``/``.
        requests: the paths served, in order.
    """

    def __init__(self, folder: Path):
        handler = functools.partial(_Handler, directory=str(folder))
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.requests = []  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def requests(self) -> list[str]:
        return self._httpd.requests  # type: ignore[attr-defined]

    def start(self) -> StaticServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> StaticServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
