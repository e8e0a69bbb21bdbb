"""One measured request as it is stored: `RequestRow`, and the tolerance its client TPOT is
compared with the server's by.

A run's rows are most of what a registry holds and what a bundle carries; the rest of a run's
record (its conditions, manifest and summaries) is schemas/bench.py's.
"""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise
from typing import Literal

from pydantic import BaseModel, Field

from specreg.schemas.triage import Triage

IdsSource = Literal["stream", "replay", "incomplete", "none"]  # where a row's token ids came from
MAX_OUTPUT_TOKENS = 65536  # the most tokens one request may ask for


# How far a client TPOT may sit below the server's own per-token time and still count as decode
# speed: the two are measured on different clocks over different spans (the client from its first
# text event to its last, the server from its first sampled token to its last), and the client's
# first and last events reach it with different delays. Below the server's figure by more than
# this, the row is flagged (`RequestRow.tpot_below_server`) and left out of the reported TPOT.
TPOT_TOLERANCE_MS = 0.5
TPOT_TOLERANCE_SHARE = 0.02


TPOT_TOLERANCE_TEXT = f"max({TPOT_TOLERANCE_MS:g} ms, {TPOT_TOLERANCE_SHARE:.0%})"  # as legends say it


def tpot_tolerance_ms(server_tpot_ms: float) -> float:
    """max(TPOT_TOLERANCE_MS, TPOT_TOLERANCE_SHARE of the server's per-token time)."""
    return max(TPOT_TOLERANCE_MS, TPOT_TOLERANCE_SHARE * server_tpot_ms)


class RequestRow(BaseModel):
    """One measured request (warm-up requests are not stored)."""

    condition_idx: int
    condition: str
    prompt_id: str
    stratum: str
    repeat: int
    started_at: datetime
    ok: bool
    error: str | None = None
    timed_out: bool = False
    # the client's clocks are monotonic: a negative time is not a measurement (a forged row's)
    ttft_ms: float | None = Field(default=None, ge=0)
    total_ms: float | None = Field(default=None, ge=0)
    tpot_ms: float | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    finish_reason: str | None = None
    prompt_n: int | None = None  # prompt tokens the server processed (timings.prompt_n)
    prompt_ms: float | None = None
    predicted_ms: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    cache_n: int | None = None
    output_text: str | None = None
    output_ids: list[int] | None = None
    # where output_ids came from: "stream" (the stream carried every id), "replay" (it did not; a
    # non-streamed return_tokens request to the same server, matching the streamed text and every
    # id the stream did carry), "incomplete" (neither: compared by text only), "none" (a chat
    # request: its stream names no ids; a chat row whose text differs from the baseline's gets them
    # by a replay: the template applied by the server, then return_tokens, kept when its text and
    # token count are the stream's). None: rows stored before specreg recorded it.
    ids_source: IdsSource | None = None
    stream_ids_n: int | None = None  # ids the stream itself carried (of output_tokens)
    # client arrivals from the first event with text on: (ms since the request was sent, tokens)
    arrivals: list[tuple[float, int]] | None = None
    server_tpot_ms: float | None = None  # the server's own timings.predicted_per_token_ms
    output_sha256: str | None = None
    matches_baseline: bool | None = None
    first_diff: int | None = None  # in diff_unit: tokens when ids were compared, else characters
    diff_unit: Literal["token", "char"] | None = None  # "char": compared by text only
    first_diff_char: int | None = None  # the first differing character (None: the texts are equal)
    diff_context: str | None = None  # a few tokens / characters either side of the first difference
    # a mismatch's first differing token judged on the baseline's top candidates there (near tie
    # or divergence: schemas/triage.py); None: equal, not greedy, or not triaged
    triage: Triage | None = None
    expect_ok: bool | None = None
    expect_detail: str | None = None
    # the sampler the request was made with and its seed (repetition seeds: schemas/sampling.py);
    # None: rows stored before specreg recorded them (greedy, the run's seed)
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None

    @property
    def ids_complete(self) -> bool:
        """Every generated id is on record: as many ids as the server's token count, from a
        source that vouches for them (rows from before the source was recorded: the count alone)."""
        ids, n = self.output_ids, self.output_tokens
        if ids is None or n is None or len(ids) != n:
            return False
        return self.ids_source in (None, "stream", "replay")

    @property
    def server_ms(self) -> float | None:
        """The server's own time for the request (timings.prompt_ms + predicted_ms: prompt
        processing and decode, as llama.cpp clocks them), None when it sent no timings."""
        if self.prompt_ms is None or self.predicted_ms is None:
            return None
        return self.prompt_ms + self.predicted_ms

    @property
    def timed_ms(self) -> float | None:
        """The request's time as speed-ups and decisions use it: the server's own (the
        client's wall clock adds the HTTP stream and whatever the client's thread waited for, a
        noise that is the client's, not the server's), the client's total when the server sent
        no timings. The client's total stays the cross-check (`contention.clock_disagreement`)."""
        server = self.server_ms
        return server if server is not None and server > 0 else self.total_ms

    @property
    def tpot_below_server(self) -> bool:
        """A client TPOT faster than the server generated the tokens, by more than the two clocks
        can disagree (`tpot_tolerance_ms`): not a decode speed (tokens that reached the client
        together, a first event the client saw late). Within the tolerance the two agree."""
        if self.tpot_ms is None or self.server_tpot_ms is None:
            return False
        return self.tpot_ms < self.server_tpot_ms - tpot_tolerance_ms(self.server_tpot_ms)

    @property
    def itl_ms(self) -> list[float]:
        """Per-token inter-token latencies after the first text: an event of k tokens gives its gap
        since the previous event once and 0 for the k - 1 tokens that came with it."""
        a = self.arrivals or []
        # no more latencies than tokens the row says were generated (a stored or imported row's
        # counts come from outside: never an allocation they size on their own)
        room = min(self.output_tokens or 0, MAX_OUTPUT_TOKENS)
        out: list[float] = []
        for (t_prev, _), (t, k) in pairwise(a):
            if len(out) >= room:
                break
            out += [t - t_prev] + [0.0] * min(max(int(k) - 1, 0), room - len(out) - 1)
        return out
