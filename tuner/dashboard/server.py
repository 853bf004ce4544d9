"""Serve a :class:`Dashboard` with the standard library (``ThreadingHTTPServer``), and
optuna-dashboard beside it on the same read-only storage."""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server as make_wsgi_server

from . import render
from .board import Dashboard
from .index import index_body
from .render import PageNotFound, page

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def plotly_js() -> bytes:
    """The Plotly library the pages load from ``/plotly.js``: served from the installed package, never a CDN."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().encode("utf-8")


def make_handler(board: Dashboard) -> type[BaseHTTPRequestHandler]:
    """The request handler of ``board``'s pages: the index, a problem, a regime, a study, and Plotly."""
    pages = {  # path head -> (number of path arguments, body renderer)
        "problem": (1, render.problem_body),
        "regime": (2, render.regime_body),
        "study": (2, render.study_body),
    }

    class Handler(BaseHTTPRequestHandler):
        server_version = "tuner-dashboard"

        def log_message(self, format: str, *args: object) -> None:  # quiet by default
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if content_type.startswith("application/javascript"):
                self.send_header("Cache-Control", "max-age=86400")
            self.end_headers()
            self.wfile.write(body)

        def _html(self, status: int, title: str, body: str) -> None:
            self._send(status, page(title, body).encode("utf-8"), "text/html; charset=utf-8")

        def do_GET(self) -> None:  # noqa: N802
            parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
            try:
                if parts == ["plotly.js"]:
                    self._send(HTTPStatus.OK, plotly_js(), "application/javascript; charset=utf-8")
                elif not parts:
                    self._html(HTTPStatus.OK, "tuner dashboard", index_body(board, board.rows()))
                elif parts[0] in pages and len(parts) == 1 + pages[parts[0]][0]:
                    self._html(HTTPStatus.OK, "/".join(parts[1:]), pages[parts[0]][1](board, *parts[1:], board.rows()))
                else:
                    self._html(HTTPStatus.NOT_FOUND, "not found", f'<p class="error">No page {_escape(self.path)}</p>')
            except PageNotFound as exc:
                self._html(HTTPStatus.NOT_FOUND, "not found", f'<p class="error">{_escape(exc)}</p>')
            except Exception as exc:  # an error page, never a stack trace
                line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                if not board.closed:  # (a page cut short by the dashboard stopping is no error)
                    log.warning("dashboard: %s: %s", self.path, line)
                self._html(HTTPStatus.INTERNAL_SERVER_ERROR, "error", f'<p class="error">Error: {_escape(line)}</p>')

    return Handler


def _escape(value: object) -> str:
    import html

    text = value.args[0] if isinstance(value, PageNotFound) and value.args else value
    return html.escape(str(text))


def make_server(board: Dashboard, host: str = "127.0.0.1", port: int = 8050) -> ThreadingHTTPServer:
    """The dashboard's HTTP server on ``host:port`` (a thread per request; local by default)."""
    server = ThreadingHTTPServer((host, port), make_handler(board))
    server.daemon_threads = True
    return server


class _QuietWSGIHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        log.debug("optuna-dashboard: " + format, *args)


class _ThreadingWSGIServer(WSGIServer):
    """optuna-dashboard's UI polls several endpoints at once: answer them in threads."""

    daemon_threads = True

    def process_request(self, request, client_address) -> None:
        threading.Thread(target=self._serve, args=(request, client_address), daemon=True).start()

    def _serve(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)


def make_optuna_dashboard_server(storage_url: str, host: str = "127.0.0.1", port: int = 8051) -> WSGIServer:
    """optuna-dashboard's WSGI app on the same database, opened read-only."""
    from optuna_dashboard import wsgi

    from .storage import readonly_study_storage

    return make_wsgi_server(host, port, wsgi(readonly_study_storage(storage_url)),
                            server_class=_ThreadingWSGIServer, handler_class=_QuietWSGIHandler)


def serve_in_background(server) -> threading.Thread:
    """Serve on a daemon thread (beside the dashboard, Optuna's own dashboard); the caller
    shuts the server down."""
    thread = threading.Thread(target=server.serve_forever, daemon=True, name=type(server).__name__)
    thread.start()
    return thread
