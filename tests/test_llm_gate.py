"""ModelGate: one caller at a time, interactive waiters before background ones."""
from __future__ import annotations

import threading
import time

import pytest

from memory.errors import ModelError
from memory.llm.gate import ModelGate


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.001)


def start_waiter(gate: ModelGate, name: str, priority: str, order: list[str]) -> threading.Thread:
    """Queue a caller and block until the gate shows it waiting, so arrival order is fixed."""
    before = gate.waiting()[priority]

    def run() -> None:
        with gate.hold(priority):
            order.append(name)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    wait_until(lambda: gate.waiting()[priority] == before + 1)
    return thread


def join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()


def test_interactive_jumps_ahead_of_queued_background() -> None:
    gate = ModelGate()
    order: list[str] = []
    gate.acquire("background")  # the writer call in progress
    threads = [start_waiter(gate, f"bg{i}", "background", order) for i in range(3)]
    threads.append(start_waiter(gate, "ask", "interactive", order))
    assert order == []  # nobody runs while the gate is held
    gate.release()
    join_all(threads)
    assert order == ["ask", "bg0", "bg1", "bg2"]


def test_interactive_callers_keep_arrival_order_and_all_go_first() -> None:
    gate = ModelGate()
    order: list[str] = []
    gate.acquire("interactive")
    threads = [
        start_waiter(gate, "bg0", "background", order),
        start_waiter(gate, "ask0", "interactive", order),
        start_waiter(gate, "bg1", "background", order),
        start_waiter(gate, "ask1", "interactive", order),
    ]
    gate.release()
    join_all(threads)
    assert order == ["ask0", "ask1", "bg0", "bg1"]


def test_interactive_waits_behind_only_the_running_call() -> None:
    """A question arriving during a writer backlog runs right after the current job."""
    gate = ModelGate()
    order: list[str] = []
    release_first = threading.Event()
    running = threading.Event()

    def long_job() -> None:
        with gate.hold("background"):
            order.append("running")
            running.set()
            release_first.wait(5)

    first = threading.Thread(target=long_job, daemon=True)
    first.start()
    assert running.wait(5)
    backlog = [start_waiter(gate, f"bg{i}", "background", order) for i in range(5)]
    ask = start_waiter(gate, "ask", "interactive", order)
    release_first.set()
    join_all([first, ask, *backlog])
    assert order[:2] == ["running", "ask"]
    assert order[2:] == [f"bg{i}" for i in range(5)]


def test_background_alone_is_fifo() -> None:
    gate = ModelGate()
    order: list[str] = []
    gate.acquire("background")
    threads = [start_waiter(gate, f"bg{i}", "background", order) for i in range(4)]
    gate.release()
    join_all(threads)
    assert order == ["bg0", "bg1", "bg2", "bg3"]


def test_only_one_holder_at_a_time_under_contention() -> None:
    gate = ModelGate()
    inside = 0
    peak = 0
    lock = threading.Lock()

    def worker(i: int) -> None:
        nonlocal inside, peak
        for _ in range(20):
            with gate.hold("interactive" if i % 3 == 0 else "background"):
                with lock:
                    inside += 1
                    peak = max(peak, inside)
                time.sleep(0.0002)
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    join_all(threads)
    assert peak == 1
    assert gate.admitted["interactive"] + gate.admitted["background"] == 160
    assert not gate.busy and gate.waiting() == {"interactive": 0, "background": 0}


def test_timeout_gives_up_and_leaves_the_queue_clean() -> None:
    gate = ModelGate()
    order: list[str] = []
    gate.acquire("background")
    result: list[bool] = []
    impatient = threading.Thread(
        target=lambda: result.append(gate.acquire("interactive", timeout=0.05)), daemon=True
    )
    impatient.start()
    later = start_waiter(gate, "bg", "background", order)
    impatient.join(5)
    assert result == [False]
    assert gate.waiting() == {"interactive": 0, "background": 1}
    gate.release()
    join_all([later])
    assert order == ["bg"]


def test_hold_timeout_raises_model_error() -> None:
    gate = ModelGate()
    gate.acquire("background")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with gate.hold("interactive", timeout=0.01):
                pass
        except ModelError as err:
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(5)
    gate.release()
    assert errors and "busy" in str(errors[0])


def test_reentrant_call_fails_loudly_instead_of_hanging() -> None:
    gate = ModelGate()
    with gate.hold("background"):
        with pytest.raises(ModelError, match="inside a model call"):
            gate.acquire("interactive")
    assert not gate.busy


def test_release_without_holder_and_bad_priority_are_errors() -> None:
    gate = ModelGate()
    with pytest.raises(RuntimeError):
        gate.release()
    with pytest.raises(ValueError, match="priority"):
        gate.acquire("urgent")


def test_exception_inside_hold_releases_the_gate() -> None:
    gate = ModelGate()
    with pytest.raises(KeyError):
        with gate.hold("background"):
            raise KeyError("boom")
    assert not gate.busy
    assert gate.acquire("background", timeout=0.1)
    gate.release()
