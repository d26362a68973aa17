"""Spans a test captured (the `spans` fixture's value), and how to read their tree."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["Spans", "span_ancestry"]


@dataclass
class Spans:
    """Spans ended in this test, and a way to wait for one without sleeping."""

    exporter: InMemorySpanExporter

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    async def wait_for(self, name: str) -> ReadableSpan:
        while True:  # bounded by the test's fail_after
            for span in self.finished():
                if span.name == name:
                    return span
            await anyio.lowlevel.checkpoint()


def span_ancestry(finished: tuple[ReadableSpan, ...], span: ReadableSpan) -> list[str]:
    """The names of `span`'s parent, its parent's parent, … among `finished`."""
    by_id = {s.context.span_id: s for s in finished if s.context is not None}
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names
