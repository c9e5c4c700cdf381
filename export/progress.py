"""Progress on stderr for the offline commands' long steps (rich; only the final state when stderr is not a
terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def stages(total: int) -> Iterator[Callable[[str], None]]:
    """A progress bar on stderr over ``total`` named steps, its clock running while a step works:
    ``stage(name)`` ends the step before and starts ``name``."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True)) as progress:
        task = progress.add_task("starting", total=total)
        started = False

        def stage(name: str) -> None:
            nonlocal started
            progress.update(task, description=name, advance=1 if started else 0)
            started = True

        yield stage
        progress.update(task, description="done", completed=total)


__all__ = ["stages"]
