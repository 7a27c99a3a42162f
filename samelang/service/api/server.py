"""A real uvicorn server in a thread of this process, on a free loopback port: what the tests and
``samelang eval pipeline`` talk HTTP to."""

from __future__ import annotations

import socket
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
            admission = getattr(app.state, "admission", None)
            if admission is not None:
                admission.close()
            super().handle_exit(sig, frame)

    return DrainingServer(config)


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", start_timeout: float = 900.0):
    """Serve ``app`` with uvicorn on a free loopback port in a daemon thread; yields its base URL
    (tests and ``samelang eval pipeline`` talk to a real HTTP server this way). ``start_timeout``
    only catches a start that hangs: an app that loads its models at start-up may first export
    them to ONNX (the int8 encoder and a cross-encoder: minutes on 2 busy cores)."""

    import uvicorn  # deferred: keeps uvicorn out of start-up

    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    server = draining_server(app, uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.time() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
