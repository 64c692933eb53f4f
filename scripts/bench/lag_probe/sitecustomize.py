"""The load benchmark's loop-lag probe, loaded into both servers (ours and the peer) through PYTHONPATH, so that the
two loops are measured the same way: a 50 ms ticker on the server's event loop, each sample's lateness appended as
`<unix time> <seconds late>` to `$BENCH_LAG_FILE.<pid>` (load.py reads the samples of each phase's window). Not
shipped: nothing of the service imports it, and without BENCH_LAG_FILE it does nothing."""

import os

_FILE = os.environ.get("BENCH_LAG_FILE")
if _FILE:
    import asyncio
    import threading
    import time

    import uvicorn.server

    _samples: list[str] = []
    _startup = uvicorn.server.Server.startup

    async def _startup_with_ticker(self: uvicorn.server.Server, *args: object, **kwargs: object) -> None:
        await _startup(self, *args, **kwargs)  # type: ignore[arg-type]

        async def tick() -> None:
            loop = asyncio.get_running_loop()
            while True:
                before = loop.time()
                await asyncio.sleep(0.05)
                _samples.append(f"{time.time():.3f} {max(0.0, loop.time() - before - 0.05):.4f}\n")

        self._bench_lag_ticker = asyncio.get_running_loop().create_task(tick())  # type: ignore[attr-defined]

    uvicorn.server.Server.startup = _startup_with_ticker  # type: ignore[method-assign]

    def _flush() -> None:
        path = f"{_FILE}.{os.getpid()}"
        while True:
            time.sleep(0.25)
            taken, _samples[:] = list(_samples), []
            if taken:
                with open(path, "a", encoding="ascii") as out:
                    out.writelines(taken)

    threading.Thread(target=_flush, name="bench-lag-probe", daemon=True).start()
