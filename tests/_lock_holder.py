"""Child process for tests/test_faults.py: holds the store's write lock like a stuck second writer.

argv: DB READY_FILE SECONDS -- opens the file, takes the write lock (BEGIN IMMEDIATE), writes
READY_FILE, holds the lock for SECONDS (or until killed), then rolls back and exits.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.db import connect  # noqa: E402


def main() -> None:
    db, ready, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    conn = connect(db)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO meta(key, value) VALUES ('lock-holder', 'x') "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value")
    ready.write_text("locked")
    time.sleep(seconds)
    conn.execute("ROLLBACK")
    conn.close()


if __name__ == "__main__":
    main()
