"""Cutting secrets out of text that arrives in pieces, as they are cut out of the whole.

A command may print a value in two writes, so a piece may end inside one of its forms:
what could be the start of a form (the redactor's longest stretch less one character) is
held back until the next piece, or the end, says whether it is one. A stretch of forms
found across that line is held back whole, unless the forms overlap on for longer than the
hold (a value like `aaaaaaaa` in a run of `a`): then it is cut up to where it ends, so at
most twice the hold is ever held and each character is looked at a bounded number of
times. Where text is missing (left out to keep a stream bounded), what was held is
dropped, and so are as many characters after the gap: either could be part of a value the
gap holds the rest of.
"""

from __future__ import annotations

from bastion.shared.redaction import Redactor, cut_spans, out_of_stretches

__all__ = ["HeldCuts"]


class HeldCuts:
    """One stream's text, given piece by piece, handed on with every value cut out."""

    def __init__(self, redactor: Redactor | None) -> None:
        self._redactor = redactor if redactor else None
        self.hold = max(0, self._redactor.longest - 1) if self._redactor is not None else 0
        """The most characters one stretch of a form spans, less one: what is held back is
        the text after the last `longest_kept - 1` characters that are not breaks, and the
        stretch of forms across that line (held whole up to this long, cut beyond), so at
        most twice this."""
        self._held = ""
        self._skip = 0
        self.dropped = 0
        """Characters dropped at gaps so far (held text, and text just after a gap)."""

    def recut(self, redactor: Redactor | None) -> None:
        """Cut with `redactor` from now on (one that knows values the last did not): what
        is held is kept, and cut with it as the stream goes on. None keeps the last one."""
        if not redactor or redactor is self._redactor:
            return
        self._redactor = redactor
        self.hold = max(0, redactor.longest - 1)

    @property
    def holding(self) -> int:
        """How many characters are held back now."""
        return len(self._held)

    def take(self, text: str) -> str:
        """What can be shown now of the text so far, `text` its next piece, values cut."""
        if self._skip:
            skipped = min(self._skip, len(text))
            self._skip -= skipped
            self.dropped += skipped
            text = text[skipped:]
        whole = self._held + text
        if self._redactor is None:
            return whole
        spans, cut = self._redactor.spans_and_tail(whole)
        held_from = out_of_stretches(spans, cut)  # a stretch across the cut is held whole
        # ... unless it runs on so long that holding it would hold more than twice the bound
        # (overlapping forms of a value like `aaaaaaaa` in a run of `a`): then it is cut up
        # to where it ends, so what is held stays bounded and is never looked at again.
        cut = (
            held_from
            if cut - held_from <= self.hold
            else out_of_stretches(spans, cut, forward=True)
        )
        self._held = whole[cut:]
        return cut_spans(whole[:cut], [span for span in spans if span[1] <= cut])

    def end(self) -> str:
        """What is still held, values cut: the stream has ended."""
        held, self._held = self._held, ""
        return self._redactor.redact(held) if self._redactor is not None else held

    def gap(self) -> None:
        """Text is missing after what was given: drop what is held, and as many characters
        of what comes next."""
        self.dropped += len(self._held)
        self._held = ""
        self._skip = self.hold
