"""A real uvicorn server in a thread of this process, on a free loopback port: what the tests and
``samelang eval pipeline`` talk HTTP to."""

from __future__ import annotations

import logging
import math
import socket
import sys
import threading
import time
from contextlib import contextmanager

from fastapi import FastAPI


def draining_server(app: FastAPI, config):
    """A uvicorn server that, on SIGTERM or SIGINT, first closes the app's admission (nothing more is admitted,
    the queued requests end at once with a 503), then shuts down as uvicorn does: running requests get the
    graceful time, then their budgets are cancelled and the model work stops at its next check."""
    import uvicorn  # deferred: keeps uvicorn out of start-up

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            admission = getattr(getattr(app, "state", None), "admission", None)
            if admission is not None:
                admission.close()
            super().handle_exit(sig, frame)

    return DrainingServer(config)


def apply_switch_interval(cfg) -> float:
    """Set the interpreter's switch interval to ``--switch-interval-ms`` (the whole process: the server's
    event loop and its model-work threads); returns the one it replaces."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(cfg.switch_interval_ms / 1000)
    return before


def serve_app(cfg, uds: str | None = None) -> None:
    """The app of ``cfg`` (``samelang serve``'s settings) on its host and port, or on the Unix socket ``uds``
    (behind the front process, :mod:`samelang.service.front`), until SIGTERM."""
    import uvicorn  # deferred: keeps uvicorn out of start-up

    from samelang.service.api.app import create_app  # deferred: the app's imports (models) only when it serves

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # faiss tries its builds from the most specialised down and logs each miss at INFO, which reads like
    # an error; the build it settled on is in /info (index) and the bench tables
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    apply_switch_interval(cfg)
    app = create_app(cfg)
    # behind the front its one client keeps connections for the next request (uvicorn would drop them after 5 s idle)
    where = {"uds": uds, "timeout_keep_alive": 3600} if uds else {"host": cfg.host, "port": cfg.port}
    config = uvicorn.Config(
        app, **where, log_level="info",
        timeout_graceful_shutdown=max(1, math.ceil(cfg.shutdown_timeout_s)),  # uvicorn: 0 would mean "forever"
    )  # fmt: skip
    draining_server(app, config).run()


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", start_timeout: float = 900.0, uds: str | None = None):
    """Serve ``app`` with uvicorn on a free loopback port (or the Unix socket ``uds``) in a daemon thread;
    yields its base URL (or ``uds``): tests and ``samelang eval pipeline`` talk to a real HTTP server this
    way. ``start_timeout`` only catches a start that hangs: an app that loads its models at start-up may
    first export them to ONNX (the int8 encoder and a cross-encoder: minutes on 2 busy cores)."""

    import uvicorn  # deferred: keeps uvicorn out of start-up

    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    where = {"uds": uds} if uds else {"host": host, "port": port}
    server = draining_server(app, uvicorn.Config(app, **where, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.time() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield uds or f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
