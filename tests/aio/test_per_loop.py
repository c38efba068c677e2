"""portable.driver.threads.PerLoop: one client per loop, found without an await, closed with its loop."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from portable.driver.threads import PerLoop
from portable.errors import Unavailable


class Client:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.closed_on: asyncio.AbstractEventLoop | None = None


def per_loop() -> tuple[PerLoop[Client], list[Client]]:
    made: list[Client] = []

    async def make() -> Client:
        await asyncio.sleep(0)
        made.append(Client(asyncio.get_running_loop()))
        return made[-1]

    async def close(client: Client) -> None:
        await asyncio.sleep(0)  # an await, as closing a session takes: it must run on a live loop
        client.closed_on = asyncio.get_running_loop()

    return PerLoop(make, close), made


def test_ready_is_the_loops_client_once_made_and_none_after_aclose() -> None:
    clients, made = per_loop()

    async def main() -> None:
        assert clients.ready() is None
        first = await asyncio.gather(*(clients.get() for _ in range(8)))
        assert len(made) == 1 and all(c is made[0] for c in first)  # concurrent first calls: one making
        assert clients.ready() is made[0]
        await clients.aclose()
        assert clients.ready() is None
        assert made[0].closed_on is asyncio.get_running_loop()
        with pytest.raises(Unavailable):
            await clients.get()

    asyncio.run(main())


def test_each_asyncio_run_closes_its_client_as_its_loop_shuts_down() -> None:
    clients, made = per_loop()

    async def use() -> None:
        assert (await clients.get()).loop is asyncio.get_running_loop()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            asyncio.run(use())
            assert len(clients) == 0
        gc.collect()
    assert len(made) == 3
    assert all(c.closed_on is c.loop for c in made), "a loop's client was not closed on that loop"


def test_a_loop_closed_without_shutting_down_is_dropped_at_the_next_making() -> None:
    clients, made = per_loop()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(clients.get())
    loop.close()  # no shutdown_asyncgens: its client cannot be closed any more
    assert loop in clients

    async def use() -> None:
        await clients.get()
        assert loop not in clients and len(clients) == 1

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(use())
        gc.collect()
    assert made[0].closed_on is None and made[1].closed_on is made[1].loop
